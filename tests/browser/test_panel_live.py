"""A running job's loss chart in the panel grows as the job logs, pushed by the event
stream's metrics subscription: no record change and no timed polling drive it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from workbench.manager import JobManager
from workbench.spec import TrainSpec

from .conftest import Lab
from .test_panel import _open_panel, _row

# One loss per file go-N the test touches in the job's folder; ends on "stop".
STEPPER = """\
import os, time
from workbench import run
step = 0
while not os.path.exists("stop"):
    if os.path.exists(f"go-{step}"):
        run.log(step=step, total=None, loss=1.0 / (step + 1))
        run.flush()
        step += 1
    else:
        time.sleep(0.02)
"""


@pytest.fixture
def this_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lab reads the wheel's extension, not an older one installed in the venv."""
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")


@pytest.fixture
def live_lab(this_build: None, panel_extension: Path, jupyter_lab: Lab) -> Lab:
    """JupyterLab with the panel from the wheel, and the stepping script in its root."""
    (jupyter_lab.root / "stepper.py").write_text(STEPPER)
    return jupyter_lab


@pytest.mark.slow
def test_a_running_jobs_loss_chart_grows_from_the_event_stream(
    live_lab: Lab, browser_page: Any, manager: JobManager
) -> None:
    root = live_lab.root
    spec = TrainSpec.from_dict(
        {"name": "live", "command": [sys.executable, "stepper.py"], "runtime": "process"},
        base_dir=root,
    )
    spec.working_dir = str(root)
    manager.submit(spec)
    (root / "go-0").touch()
    page = browser_page
    panel = _open_panel(page, live_lab)
    _row(page, "live", "Running").wait_for(timeout=60_000)
    _row(page, "live").click()
    detail = panel.locator('.jp-WorkbenchPanel-detail[data-job="live"]')
    title = detail.locator('.jp-WorkbenchPanel-title [data-status="Running"]')
    title.wait_for(state="attached", timeout=30_000)
    line = detail.locator('figure[data-chart="loss"] path[data-series="rank 0"]')
    line.and_(page.locator('[data-drawn="1"]')).wait_for(state="attached", timeout=30_000)
    # From here the job only logs: its record (the change feed) stays as it is.
    changes = manager.last_change_id()
    for step in (1, 2, 3):
        (root / f"go-{step}").touch()
        line.and_(page.locator(f'[data-drawn="{step + 1}"]')).wait_for(
            state="attached", timeout=30_000
        )
    assert manager.last_change_id() == changes, "a job change, not the metrics, drew the chart"
    assert manager.get("live").status.value == "Running"
    assert title.count() == 1  # still shown as Running
    (root / "stop").touch()
    manager.wait("live", timeout=60)
