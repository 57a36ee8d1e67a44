"""The live job widget: model state as a real job moves through its states."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from workbench.api import Job, describe
from workbench.manager import JobManager
from workbench.spec import TrainSpec
from workbench.widgets.job import JobWidget

from ..conftest import job_processes


def _until(check: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"condition not met in {timeout}s")


def _state(widget: object) -> dict[str, object]:
    return widget.get_state()  # type: ignore[attr-defined, no-any-return]


def _status(widget: JobWidget) -> str:
    found = re.findall(r'data-status="(\w+)"', str(_state(widget.status)["value"]))
    return found[0] if found else ""


def _rank_cells(status_html: str, rank: int) -> list[str]:
    """The text of each cell in rank ``rank``'s table row."""
    row = re.search(rf'<tr data-rank="{rank}">(.*?)</tr>', status_html)
    assert row, status_html
    return [re.sub(r"<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1))]


def _assert_cancel_hidden(wdg: JobWidget) -> None:
    """An ended job offers no Cancel; its status is the header's badge, not a button."""
    button = _state(wdg.cancel_button)
    assert button["disabled"] is True and button["description"] in ("Cancel", "Cancelling…")
    assert _state(wdg.cancel_button.layout)["display"] == "none"


@pytest.fixture
def widgets() -> Iterator[list[JobWidget]]:
    """Widgets made by a test; closed after it, and their threads must be gone."""
    made: list[JobWidget] = []
    yield made
    for wdg in made:
        wdg.close()
        assert not wdg.polling


def _submit(manager: JobManager, command: list[str], cwd: Path, **fields: object) -> Job:
    spec = TrainSpec.from_dict({"command": command, "working_dir": str(cwd), **fields})
    record = manager.submit(spec)
    return Job(record.name, manager, record)


def test_widget_follows_a_job_to_succeeded_and_charts_its_scalars(
    manager: JobManager, scripts: Path, widgets: list[JobWidget]
) -> None:
    job = _submit(
        manager, ["python", "scalars.py", "12", "0.15"], scripts,
        name="wid-ok", workers=2, env={"WORKBENCH_RUN_INTERVAL": "0"},
    )  # fmt: skip
    wdg = JobWidget(job, interval=0.2)
    widgets.append(wdg)
    assert _status(wdg) in ("Pending", "Running") and wdg.polling
    assert _state(wdg.rank_picker)["_options_labels"] == ("rank 0", "rank 1")
    # While running: the bar moves with the reported steps, the log follows rank 0.
    _until(lambda: 0 < int(_state(wdg.progress)["value"]) < 12)  # type: ignore[call-overload]
    assert _status(wdg) == "Running"
    assert _state(wdg.progress)["max"] == 12
    assert "rank 0 line" in str(_state(wdg.logs)["value"])
    # Switching the rank switches the log view.
    wdg.rank_picker.value = 1
    _until(lambda: "rank 1 line" in str(_state(wdg.logs)["value"]))
    assert 'data-rank="1"' in str(_state(wdg.logs)["value"])

    _until(lambda: not wdg.polling, timeout=60)  # the thread ends by itself with the job
    record = manager.get("wid-ok")
    assert record.status.value == "Succeeded"
    assert _status(wdg) == "Succeeded"
    assert _state(wdg.progress)["value"] == 12 and _state(wdg.progress)["bar_style"] == "success"
    status_html = str(_state(wdg.status)["value"])
    assert f'data-cost="{record.cost():.6f}"' in status_html
    assert [_rank_cells(status_html, r)[:3] for r in (0, 1)] == [
        ["0", "Succeeded", "0"],
        ["1", "Succeeded", "0"],
    ]
    assert "rank 1 finished" in str(_state(wdg.logs)["value"])
    _assert_cancel_hidden(wdg)

    # The chart got every scalar the script logged (rank 0's, the default).
    chart = str(_state(wdg.chart)["value"])
    logged = manager.metrics("wid-ok")["scalars"]
    assert [r["step"] for r in logged] == list(range(1, 13))
    for name in ("loss", "acc"):
        panel = re.search(rf'<svg [^>]*data-series="{name}"[^>]*>', chart)
        assert panel, chart
        attrs = dict(re.findall(r'(data-[\w-]+)="([^"]*)"', panel.group(0)))
        assert attrs["data-count"] == "12" and attrs["data-points"] == "12"
        assert float(attrs["data-last"]) == logged[-1][name] and attrs["data-last-step"] == "12"
    points = re.search(r'data-series="loss".*? points="([^"]*)"', chart)
    assert points and len(points.group(1).split()) == 12
    # The text form is still there for plain-text outputs.
    assert job._repr_mimebundle_() == {"text/plain": describe(record)}
    assert describe(record).startswith("Job wid-ok: Succeeded")


def test_widget_shows_failures_and_restarts_as_they_happen(
    manager: JobManager, scripts: Path, widgets: list[JobWidget]
) -> None:
    job = _submit(
        manager, ["python", "flaky.py"], scripts, name="wid-flaky", workers=2, max_retries=1
    )
    wdg = JobWidget(job, interval=0.2)
    widgets.append(wdg)
    _until(lambda: not wdg.polling)
    record = manager.get("wid-flaky")
    assert record.status.value == "Succeeded" and record.attempt == 2
    html = str(_state(wdg.status)["value"])
    assert "attempt 2 of 2" in html
    reasons = [e.reason for e in record.events[-6:]]
    assert "Restarting" in {e.reason for e in record.events}
    assert re.findall(r'data-event="(\w+)"', html) == reasons


def test_cancel_button_stops_the_job_and_every_process(
    manager: JobManager, scripts: Path, widgets: list[JobWidget]
) -> None:
    job = _submit(
        manager, ["python", "scalars.py", "1000", "0.1"], scripts, name="wid-cancel", workers=2
    )
    wdg = JobWidget(job, interval=0.2)
    widgets.append(wdg)
    _until(lambda: manager.get("wid-cancel").status.value == "Running")
    _until(lambda: len(job_processes("wid-cancel")) >= 2)
    wdg.cancel_button.click()  # what ipywidgets does when the frontend sends a click
    assert _state(wdg.cancel_button)["disabled"] is True
    assert manager.wait("wid-cancel", timeout=30).status.value == "Cancelled"
    _until(lambda: not wdg.polling)
    assert _status(wdg) == "Cancelled"
    _assert_cancel_hidden(wdg)
    _until(lambda: job_processes("wid-cancel") == [], timeout=10)


def test_log_view_stays_bounded_on_a_huge_log(
    manager: JobManager, tmp_path: Path, widgets: list[JobWidget]
) -> None:
    # 200k lines (about 12 MB), one of them 1 MB long: the view keeps the last lines, cut short.
    code = (
        "import sys\nw = sys.stdout.write\n"
        "for i in range(200000): w(f'rank 0 chatty line {i} ' + 'x' * 40 + '\\n')\n"
        "w('y' * 1000000 + '\\n')\nw('last line\\n')\n"
    )
    job = _submit(manager, ["python", "-c", code], tmp_path, name="wid-huge")
    manager.wait("wid-huge", timeout=60)
    wdg = JobWidget(job, log_lines=25)
    widgets.append(wdg)
    assert not wdg.polling  # already ended: one refresh, no thread
    view = str(_state(wdg.logs)["value"])
    assert 'data-lines="25"' in view and view.count("\n") == 24
    assert "last line" in view and "chatty line 199999" in view and "chatty line 199970" not in view
    assert len(view) < 25 * 400 and "y" * 300 in view and "y" * 301 not in view


def test_closing_the_widget_stops_its_thread(
    manager: JobManager, scripts: Path, widgets: list[JobWidget]
) -> None:
    before = {t.name for t in threading.enumerate()}
    job = _submit(manager, ["python", "scalars.py", "1000", "0.1"], scripts, name="wid-close")
    wdg = JobWidget(job, interval=0.2)
    assert wdg.polling
    wdg.close()
    assert not wdg.polling
    assert {t.name for t in threading.enumerate()} - before == set()
    assert manager.get("wid-close").status.value in (
        "Pending",
        "Running",
    )  # closing a view is not cancelling
