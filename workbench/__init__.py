"""workbench: launch and watch distributed GPU training from Jupyter, a CLI or Python.

Imports are lazy so ``from workbench import run`` inside a training script costs nothing.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "submit": "workbench.api",
    "from_manifest": "workbench.api",
    "export": "workbench.api",
    "get": "workbench.api",
    "jobs": "workbench.api",
    "Job": "workbench.api",
    "JobManager": "workbench.manager",
    "TrainSpec": "workbench.spec",
    "Mount": "workbench.spec",
    "JobStatus": "workbench.spec",
    "JobRecord": "workbench.spec",
    "Settings": "workbench.settings",
    "WorkbenchError": "workbench.errors",
    "SpecError": "workbench.errors",
    "BackendError": "workbench.errors",
    "BackendUnavailableError": "workbench.errors",
    "SubmitError": "workbench.errors",
    "JobNotFoundError": "workbench.errors",
    "MountError": "workbench.errors",
    "MonitorUnavailableError": "workbench.errors",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    """The jupyter_server extension (``workbench``); imported only when a server loads it."""
    from .server import _jupyter_server_extension_points as points

    return points()


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext workbench``: register the %gpu_train family of magics."""
    from .magics import load_ipython_extension as load

    load(ipython)
