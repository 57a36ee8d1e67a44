"""The panel's Submit tab in a real JupyterLab (the extension installed from the built wheel)
and Debian's Chromium: "Train with workbench" on a .py file in the file browser opens the
form with the script filled; bad values show the server's own error next to the field they
name; a real 2-worker job is submitted from the form and followed to Succeeded in the Jobs
tab's view, both ranks' logs read there. The settings schema ships in the wheel, the server
validates against it, and the panel reads it (defaultBackend picks the form's backend;
followLogs=false: a running job's view waits to be asked to follow)."""

from __future__ import annotations

import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from workbench.manager import JobManager

from .conftest import Lab
from .test_panel import IMAGES, _open_panel, _palette

PLUGIN = "jupyter-gpu-workbench:plugin"
JOB = "form-job"

# Each rank logs a few steps and scalars (the charts' food), then waits for the test to
# have seen it Running (the file "go-on").
SCRIPT = """\
import os, time
from workbench import run
rank = os.environ["RANK"]
for step in range(1, 4):
    run.log(step=step, total=3, rank=None, loss=1.0 / step + 0.1 * int(rank))
    print(f"rank {rank} step {step}", flush=True)
    time.sleep(0.05)  # one record per run.log slot
run.flush()
while not os.path.exists("go-on"):
    time.sleep(0.1)
print(f"rank {rank} done", flush=True)
"""


def _settings(lab: Lab, method: str = "GET", values: dict[str, Any] | None = None) -> Any:
    """JupyterLab's settings API for the panel's plugin: (status, body)."""
    body = None if values is None else json.dumps({"raw": json.dumps(values)}).encode()
    request = urllib.request.Request(
        f"{lab.url}/lab/api/settings/{PLUGIN}",
        data=body,
        method=method,
        headers={"Authorization": f"token {lab.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            return response.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


@pytest.fixture
def lab(panel_extension: Path, jupyter_lab: Lab) -> Lab:
    """JupyterLab with the panel from the wheel, and the script to train in its root."""
    (jupyter_lab.root / "train_submit.py").write_text(SCRIPT)
    return jupyter_lab


@pytest.mark.slow
def test_submit_form_runs_a_2_worker_job_and_names_bad_fields(
    lab: Lab, panel_extension: Path, browser_page: Any, manager: JobManager, tmp_path: Path
) -> None:
    # The schema came with the wheel: the server serves it and validates values against it.
    status, plugin = _settings(lab)
    assert status == 200, plugin
    assert set(plugin["schema"]["properties"]) >= {"defaultBackend", "followLogs", "pageSize"}
    status, body = _settings(lab, "PUT", {"pageSize": 0})
    assert status == 400 and "pageSize" in json.dumps(body), (status, body)
    values = {"followLogs": False, "defaultBackend": "local", "validateDelayMs": 150}
    status, body = _settings(lab, "PUT", values)
    assert status == 204, (status, body)

    from playwright.sync_api import expect  # after browser_page has said what is missing

    page = browser_page
    panel = _open_panel(page, lab)
    # The page loads the wheel's build (its remoteEntry), not another copy.
    loaded = page.evaluate(
        "() => JSON.parse(document.getElementById('jupyter-config-data').textContent)"
        ".federated_extensions.find(e => e.name === 'jupyter-gpu-workbench')"
    )
    assert (panel_extension / loaded["load"]).is_file(), loaded

    # The palette command opens the Submit tab; the tabs move with the arrow keys.
    _palette(page, "Workbench: Open submit form", "workbench:open-submit")
    form = panel.get_by_role("form", name="Submit a training job")
    form.wait_for(timeout=15_000)
    assert form.get_by_label("Script").input_value() == ""
    submit_tab = panel.get_by_role("tab", name="Submit")
    submit_tab.focus()
    page.keyboard.press("ArrowLeft")  # the tab before Submit (Jobs, or GPUs with lane gpus)
    expect(submit_tab).to_have_attribute("aria-selected", "false")
    expect(panel.locator('[role="tab"]:focus')).to_have_attribute("aria-selected", "true")
    page.keyboard.press("ArrowRight")
    expect(submit_tab).to_have_attribute("aria-selected", "true")
    expect(submit_tab).to_be_focused()

    # Right-click the script in the file browser: "Train with workbench" fills the form.
    panel.get_by_role("tab", name="Jobs").click()  # the command brings Submit back
    page.locator('.jp-SideBar [data-id="filebrowser"]').click()
    item = page.locator(".jp-DirListing-item", has_text="train_submit.py")
    item.click(button="right")
    menu_item = page.locator('.lm-Menu-item[data-command="workbench:open-submit"]')
    assert menu_item.inner_text().strip() == "Train with workbench"
    menu_item.click()
    expect(form.get_by_label("Script")).to_have_value("train_submit.py")
    assert panel.get_by_role("tab", name="Submit").get_attribute("aria-selected") == "true"

    # The first check (a dry run) prices the plan; the pickers come from the catalogue and
    # the capabilities route.
    form.locator(".jp-WorkbenchSubmit-price").wait_for(timeout=15_000)
    expect(form.get_by_label("Backend")).to_have_value("local")  # the defaultBackend setting
    assert form.get_by_label("Instance spec").locator("option", has_text="$").count() >= 3
    runtimes = form.get_by_label("Runtime").locator("option").all_inner_texts()
    assert "process" in runtimes, runtimes

    # A bad value: the server's message sits next to the field it names, as the user types.
    form.get_by_label("Workers").fill("0")
    error = form.locator('.jp-WorkbenchSubmit-fieldError[data-field="workers"]')
    error.wait_for(timeout=15_000)
    assert "workers: must be at least 1" in error.inner_text()
    assert form.get_by_label("Workers").get_attribute("aria-invalid") == "true"
    form.get_by_label("Workers").fill("2")
    error.wait_for(state="detached", timeout=15_000)
    # A data URL with a scheme no store serves: the mounts say so.
    form.get_by_role("button", name="Add mount").click()
    form.get_by_label("Mount 1 source").fill("foo://bucket/x")
    form.get_by_label("Mount 1 target").fill("/data")
    mounts = form.locator('.jp-WorkbenchSubmit-fieldError[data-field="mounts"]')
    mounts.wait_for(timeout=15_000)
    assert "unknown scheme 'foo'" in mounts.inner_text(), mounts.inner_text()
    form.get_by_label("Remove mount 1").click()
    mounts.wait_for(state="detached", timeout=15_000)

    form.get_by_label("Job name").fill(JOB)
    form.get_by_label("Runtime").select_option("process")
    form.get_by_role("button", name="Add variable").click()
    form.get_by_label("Variable 1 name").fill("LR")
    form.get_by_label("Variable 1 value").fill("0.1")
    price = form.locator(".jp-WorkbenchSubmit-price")
    page.wait_for_function(
        "() => !document.querySelector('.jp-WorkbenchSubmit-plan[data-checking=\"true\"]')",
        timeout=15_000,
    )
    assert price.inner_text().startswith("Price: $") and "2 workers" in price.inner_text()
    assert form.locator('[role="alert"]').count() == 0, form.inner_text()
    shot = tmp_path / "panel-submit.png"
    panel.screenshot(path=str(shot))

    # Submit: the Jobs tab opens the new job's view, which follows it to Succeeded.
    form.get_by_role("button", name="Submit the job").click()
    detail = panel.locator(f'.jp-WorkbenchPanel-detail[data-job="{JOB}"]')
    detail.wait_for(timeout=15_000)
    assert panel.get_by_role("tab", name="Jobs").get_attribute("aria-selected") == "true"
    record = manager.get(JOB)
    assert record.workers == 2 and record.spec["env"] == {"LR": "0.1"}, record.spec
    assert record.spec["command"] == ["python", "train_submit.py"], record.spec
    # followLogs=false (the setting): a running job's view waits to be asked to follow.
    detail.locator('.jp-WorkbenchPanel-title [data-status="Running"]').wait_for(timeout=60_000)
    follow = detail.get_by_label("Follow the log")
    assert not follow.is_checked()
    detail.locator('[data-following="false"]').wait_for(timeout=10_000)
    follow.check()
    detail.locator('[data-following="true"]').wait_for(timeout=10_000)
    (lab.root / "go-on").touch()
    detail.locator('.jp-WorkbenchPanel-title [data-status="Succeeded"]').wait_for(timeout=90_000)
    assert manager.get(JOB).status.value == "Succeeded"
    # The job's loss, logged by both ranks through run.log, is drawn: 3 points a rank.
    loss = detail.locator('figure[data-chart="loss"]')
    for rank in (0, 1):
        loss.locator(f'path[data-series="rank {rank}"][data-drawn="3"]').wait_for(timeout=30_000)
    ranks = detail.locator(".jp-WorkbenchPanel-ranks tbody tr")
    assert ranks.count() == 2
    log = detail.get_by_label("Log text")
    detail.locator('.jp-WorkbenchPanel-log[data-rank="0"]', has_text="rank 0 done").wait_for(
        timeout=15_000
    )
    detail.get_by_label("Which rank's log").select_option("1")
    detail.locator('.jp-WorkbenchPanel-log[data-rank="1"]', has_text="rank 1 done").wait_for(
        timeout=15_000
    )
    assert log.inner_text().splitlines() == [f"rank 1 step {i}" for i in (1, 2, 3)] + [
        "rank 1 done"
    ]
    assert panel.locator('[role="alert"]').count() == 0, panel.inner_text()

    if os.environ.get("WORKBENCH_UPDATE_IMAGES") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, IMAGES / "panel-submit.png")
