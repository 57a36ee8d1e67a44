"""Notebook widgets: the live job view (``JobWidget``). Imports ipywidgets only when used."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..monitor import HostSampler
    from ._feed import JobHandle as Job  # a handle with .name and .manager (api.Job is one)
    from .job import JobWidget

__all__ = ["JobWidget", "job_mimebundle", "show_gpus", "show_job", "widget_frontend"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
INSTALL_HINT = "the live job view needs ipywidgets: pip install 'jupyter-gpu-workbench[notebook]'"
GPU_INSTALL_HINT = (
    "the GPU monitor widget needs ipywidgets: pip install 'jupyter-gpu-workbench[notebook]'"
)


def __getattr__(name: str) -> Any:
    if name == "JobWidget":
        from .job import JobWidget

        return JobWidget
    raise AttributeError(f"module 'workbench.widgets' has no attribute {name!r}")


def widget_frontend() -> bool:
    """True inside a Jupyter kernel (a frontend that can show widgets), False in a terminal."""
    ipython_mod = sys.modules.get("IPython")
    if ipython_mod is None:
        return False
    shell = ipython_mod.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def job_mimebundle(job: Job, text: str) -> dict[str, Any]:
    """A Job's display: the live widget plus ``text`` in a kernel, ``text`` alone elsewhere."""
    if not widget_frontend():
        return {"text/plain": text}
    try:
        from .job import JobWidget
    except ImportError:
        return {"text/plain": f"{text}\n({INSTALL_HINT})"}
    widget = getattr(job, "_widget", None)
    if widget is None or widget.comm is None:  # never shown, or closed since
        widget = JobWidget(job)
        job._widget = widget  # type: ignore[attr-defined]
    bundle: dict[str, Any] = dict(widget._repr_mimebundle_() or {})
    bundle["text/plain"] = text
    return bundle


def show_job(job: Job, text: str) -> None:
    """Display a Job in IPython: the live widget under a display id that the widget updates
    when the job ends, so the text a saved notebook keeps is the final state."""
    from IPython.display import display

    bundle = job_mimebundle(job, text)
    if WIDGET_VIEW not in bundle:
        display(bundle, raw=True)
        return
    handle = display(bundle, raw=True, display_id=True)
    job._widget.track_display(handle)  # type: ignore[attr-defined]


def show_gpus(sampler: HostSampler | None = None) -> Any:
    """A card per GPU of this host (gauges, history, alerts): what ``%gpu_monitor`` shows."""
    try:
        from .gpu_monitor import GpuMonitorWidget
    except ImportError:
        raise ImportError(GPU_INSTALL_HINT) from None
    from ..monitor import get_host_sampler

    return GpuMonitorWidget(sampler or get_host_sampler())
