"""The live job widget: status, per-rank state, log tail, progress/ETA, scalar chart, cancel.

One daemon thread per widget polls a ``JobFeed`` every ``interval`` seconds (1 s default)
and sets the widgets' values; ipywidgets sends only values that changed, and each widget
at most once per tick, so a chatty job costs at most four small messages a second. The
thread ends by itself once the job has ended (after a last refresh) or the widget is
closed, so nothing is left running in the kernel. A thread rather than an asyncio task:
ipykernel's loop is busy while a cell runs, and the view must keep moving then too.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import ipywidgets as w

from ..errors import WorkbenchError
from ..tables import describe
from ._feed import LOG_LINES, JobFeed, JobHandle
from ._render import chart_svg, default_series, log_html, status_html

MIN_INTERVAL = 0.2


class JobWidget(w.VBox):
    """A live view of one job that updates while the user works in other cells."""

    def __init__(
        self, job: JobHandle, interval: float = 1.0, log_lines: int = LOG_LINES, **kwargs: Any
    ) -> None:
        self.job = job
        self.interval = max(MIN_INTERVAL, interval)
        self.feed = JobFeed(job.manager, job.name, log_lines=log_lines)
        self._gpu_note: str | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._lock = threading.RLock()  # one refresh at a time; re-entered via the rank picker
        self._thread: threading.Thread | None = None
        self._displays: list[Any] = []  # IPython DisplayHandles showing this widget
        self._displays_final = False

        self.status = w.HTML()
        self.progress = w.IntProgress(
            value=0, min=0, max=1, description="step", bar_style="info",
            layout=w.Layout(width="100%", max_width="640px"),
        )  # fmt: skip
        self.chart = w.HTML()
        # Which scalars to draw: loss/acc/lr (or the first ones) until the user picks.
        self.series_picker = w.SelectMultiple(
            options=[], rows=4, description="series", layout=w.Layout(width="320px")
        )
        self.chosen: list[str] | None = None
        self._picking = False  # set while the code, not the user, changes the picker
        self.rank_picker = w.Dropdown(description="log of", options=[("rank 0", 0)], value=0)
        self.cancel_button = w.Button(description="Cancel", button_style="danger", icon="stop")
        self.logs = w.HTML()
        self.rank_picker.observe(self._on_rank, names="value")
        self.series_picker.observe(self._on_series, names="value")
        self.cancel_button.on_click(self._on_cancel)
        controls = w.HBox([self.rank_picker, self.series_picker, self.cancel_button])
        super().__init__([self.status, self.progress, self.chart, controls, self.logs], **kwargs)

        self.refresh()  # right values before the first paint
        if not self.finished:
            self._thread = threading.Thread(
                target=self._loop, name=f"workbench-widget-{job.name}", daemon=True
            )
            self._thread.start()

    # ---- state --------------------------------------------------------------------------
    @property
    def finished(self) -> bool:
        """True once the job has ended (the widget then stops polling)."""
        r = self.feed.record
        return r is not None and r.status.terminal

    @property
    def polling(self) -> bool:
        """True while the refresh thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def refresh(self) -> None:
        """Read the job once and update every child widget (changed values only)."""
        with self._lock:
            try:
                record = self.feed.poll()
            except WorkbenchError as e:  # deleted under us, or the backend went away
                self.status.value = f"<b>{self.job.name}</b>: {e}"
                self._stop.set()
                return
            if record.gpus_total and not self.feed.gpus and self._gpu_note is None:
                self._gpu_note = _gpu_reason()
            note = self._gpu_note if record.gpus_total else "none requested (CPU job)"
            self.status.value = status_html(
                record, self.feed.progress, list(self.feed.gpus.values()), note
            )
            p = self.feed.progress
            if p.step is not None:
                with self.progress.hold_sync():  # one message for value, max and style
                    self.progress.max = max(p.total or p.step, 1)
                    self.progress.value = min(p.step, self.progress.max)
                    self.progress.bar_style = _bar_style(record.status.value)
            elif record.status.terminal:
                self.progress.bar_style = _bar_style(record.status.value)
            self._sync_series_picker()
            self.chart.value = chart_svg(self.feed.series, self.chosen)
            options = [(f"rank {i}", i) for i in range(record.workers)]
            if list(self.rank_picker.options) != options:
                self.rank_picker.options = options
            self.logs.value = log_html(self.feed.log, self.feed.rank)
            if record.status.terminal:
                self._finalise_displays(record)
                # Nothing left to cancel, and the header's badge says how it ended: a
                # disabled button naming the status read as a (red) control.
                self.cancel_button.disabled = True
                self.cancel_button.layout.display = "none"

    def track_display(self, handle: Any) -> None:
        """Update ``handle``'s text form when the job ends (at once if it has ended)."""
        with self._lock:
            self._displays.append(handle)
            if self.finished and self.feed.record is not None:
                self._displays_final = False
                self._finalise_displays(self.feed.record)

    def _finalise_displays(self, record: Any) -> None:
        # The displayed output's text/plain is what a saved notebook shows on GitHub or
        # nbviewer: replace the first snapshot ("Running") with how the job ended.
        if self._displays_final or not self._displays:
            return
        self._displays_final = True
        bundle = dict(self._repr_mimebundle_() or {})
        bundle["text/plain"] = describe(record)
        for handle in self._displays:
            with contextlib.suppress(Exception):  # a closed frontend must not kill the view
                handle.update(bundle, raw=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            with contextlib.suppress(Exception):  # a failed tick must not kill the view
                self.refresh()
            if self.finished:
                break  # that was the last refresh: logs and scalars are complete

    # ---- controls -----------------------------------------------------------------------
    def _on_rank(self, change: dict[str, Any]) -> None:
        if change["new"] is None:
            return
        self.feed.rank = int(change["new"])
        if self.polling:
            self._wake.set()
        else:
            self.refresh()

    def _sync_series_picker(self) -> None:
        names = sorted(self.feed.series)
        shown = self.chosen if self.chosen is not None else default_series(list(self.feed.series))
        self._picking = True
        try:
            with self.series_picker.hold_sync():
                if list(self.series_picker.options) != names:
                    self.series_picker.options = names
                if set(self.series_picker.value) != set(shown):
                    self.series_picker.value = tuple(shown)
        finally:
            self._picking = False

    def _on_series(self, change: dict[str, Any]) -> None:
        if self._picking:
            return
        self.chosen = list(change["new"])
        with self._lock:
            self.chart.value = chart_svg(self.feed.series, self.chosen)

    def show_series(self, names: list[str]) -> None:
        """Draw these scalars (as picking them in the series list does)."""
        self.series_picker.value = tuple(n for n in names if n in self.series_picker.options)

    def _on_cancel(self, _button: Any) -> None:
        self.cancel_button.disabled = True
        self.cancel_button.description = "Cancelling…"

        def cancel() -> None:
            # Off the kernel's main thread: cancel waits for the processes to go.
            with contextlib.suppress(WorkbenchError):
                self.job.manager.cancel(self.job.name)
            if self.polling:
                self._wake.set()
            else:
                self.refresh()

        self.cancel_thread = threading.Thread(
            target=cancel, name=f"workbench-cancel-{self.job.name}", daemon=True
        )
        self.cancel_thread.start()

    def close(self) -> None:
        """Stop polling and close the widget and its children."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        for child in (
            self.status,
            self.progress,
            self.chart,
            self.rank_picker,
            self.series_picker,
            self.cancel_button,
            self.logs,
        ):
            child.close()
        for box in self.children:
            box.close()
        super().close()


def _bar_style(status: str) -> str:
    return {
        "Succeeded": "success",
        "Failed": "danger",
        "Cancelled": "warning",
        "Cancelling": "warning",
    }.get(status, "info")


def _gpu_reason() -> str:
    """Why the job's GPUs have no samples (the monitor says why, e.g. no driver here)."""
    try:
        from ..monitor import gpu_inventory

        gpu_inventory()
    except WorkbenchError as e:
        return str(getattr(e, "reason", e))
    return "waiting for the monitor's first sample"
