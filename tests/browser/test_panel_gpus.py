"""The panel's GPUs and Datasets tabs, the job view's charts and the dark theme, in a real
JupyterLab and Debian's Chromium.

On this GPU-less machine the GPUs tab must say what ``workbench top`` says; with the fake
NVML (tests/fakes, imported as ``pynvml`` by the Jupyter server) it shows a card per GPU
whose figures, sparklines and alerts come from the server's sampler over the event stream.
A finished job's training scalars are drawn as charts (its NaN loss a gap, not a line to
infinity), "open in notebook" writes the job's code into a new notebook, and the panel
follows the dark theme. Screenshots go to tmp_path (and docs/images/panel-gpus.png,
panel-job.png, panel-dark.png with WORKBENCH_UPDATE_IMAGES=1).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workbench.manager import JobManager
from workbench.spec import TrainSpec

from .conftest import Lab
from .test_panel import IMAGES, _luminance, _palette, _row

ROOT = Path(__file__).resolve().parents[2]
FAKE_PKG = ROOT / "tests" / "fakes" / "nvml_pkg"

# Two H100s: GPU 0 trains and runs hot (88 C crosses the 85 C rule), GPU 1 sits idle.
SCENARIO = {
    "step_seconds": 0.5,
    "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * 2**30, "power_limit": 700,
         "steps": [{"utilization": u, "temperature": t, "memory_used": m * 2**30, "power": p}
                   for u, t, m, p in [(35, 52, 20, 260), (78, 64, 61, 520), (96, 79, 66, 655),
                                      (91, 84, 66, 640), (98, 88, 67, 690)]]},
        {"name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * 2**30, "power_limit": 700,
         "steps": [{"utilization": 0, "temperature": 34, "memory_used": 0, "power": 61}]},
    ],
}  # fmt: skip

# Training scalars from both ranks (rank=None; WORKBENCH_RUN_INTERVAL=0 keeps every call);
# step 7's loss is NaN (null on the wire): a gap.
TRAIN = """\
import os
from workbench import run
rank = int(os.environ["RANK"])
for step in range(1, 21):
    loss = 2.0 / step + 0.05 * rank
    nan = float("nan")
    run.log(step=step, total=20, rank=None, loss=nan if step == 7 else loss, lr=0.1 * 0.9**step)
run.flush()
"""

GPU_CARDS_JS = """
panel => [...panel.querySelectorAll('.jp-WorkbenchPanel-card[data-gpu]')].map(card => ({
  gpu: card.dataset.gpu,
  title: card.querySelector('h4').textContent,
  gauges: [...card.querySelectorAll('[role=meter]')].map(m => m.getAttribute('aria-label')),
  points: [...card.querySelectorAll('svg[data-points]')].map(s => Number(s.dataset.points)),
  alerts: [...card.querySelectorAll('li[data-kind]')].map(li => [li.dataset.kind, li.textContent]),
  idle: card.querySelector('.jp-WorkbenchPanel-idle').textContent,
}))
"""


def _open_tab(page: Any, lab: Lab, command: str, label: str) -> Any:
    """Load Lab and open the panel with a palette command; the panel."""
    page.goto(f"{lab.url}/lab?token={lab.token}")
    page.locator('.jp-SideBar [data-id="jp-workbench-panel"]').wait_for(timeout=60_000)
    page.locator(".jp-Launcher").first.wait_for(timeout=60_000)
    page.locator(".jp-Launcher").first.click()
    _palette(page, label, command)
    panel = page.locator("#jp-workbench-panel")
    panel.wait_for(state="visible", timeout=15_000)
    return panel


def _save(shots: dict[str, Path]) -> None:
    if os.environ.get("WORKBENCH_UPDATE_IMAGES") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        for name, shot in shots.items():
            shutil.copyfile(shot, IMAGES / name)


@pytest.fixture
def this_build(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lab reads the extension copied into the test's data dir, not an older one installed
    in the venv (jupyter_core prefers a venv's dirs to the user's unless told not to)."""
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The Jupyter server started after this imports the fake NVML as ``pynvml``."""
    path = tmp_path / "gpus.json"
    path.write_text(json.dumps(SCENARIO))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(FAKE_PKG), str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.setenv("WORKBENCH_FAKE_NVML", str(path))
    monkeypatch.setenv("WORKBENCH_GPU_INTERVAL", "0.5")
    return path


@pytest.fixture
def gpu_lab(
    this_build: None,
    fake_gpus: Path,
    panel_extension: Path,
    jupyter_lab: Lab,
) -> Iterator[Lab]:
    """JupyterLab with the panel, on a fake 2-GPU host."""
    yield jupyter_lab


@pytest.fixture
def plain_lab(this_build: None, panel_extension: Path, jupyter_lab: Lab) -> Iterator[Lab]:
    """JupyterLab with the panel, on this GPU-less host."""
    yield jupyter_lab


@pytest.mark.slow
def test_gpus_tab_cards_job_charts_and_dark_theme(
    gpu_lab: Lab, browser_page: Any, manager: JobManager, tmp_path: Path
) -> None:
    page = browser_page
    (gpu_lab.root / "train_scalars.py").write_text(TRAIN)
    panel = _open_tab(page, gpu_lab, "workbench:open-gpus", "Workbench: Open GPUs")
    spec = TrainSpec.from_dict(
        {"name": "charted", "command": [sys.executable, "train_scalars.py"], "workers": 2,
         "runtime": "process", "env": {"WORKBENCH_RUN_INTERVAL": "0"}},
        base_dir=gpu_lab.root,
    )  # fmt: skip
    spec.working_dir = str(gpu_lab.root)
    manager.submit(spec)

    # A card per GPU; the sparklines grow from the stream's gpu frames; GPU 0's alert.
    gpus = panel.locator(".jp-WorkbenchPanel-gpus")
    try:
        gpus.locator('.jp-WorkbenchPanel-card[data-gpu="0"] li[data-kind="temperature"]').wait_for(
            timeout=60_000
        )
        page.wait_for_function(
            "() => [...document.querySelectorAll('#jp-workbench-panel svg[data-points]')]"
            ".every(s => Number(s.dataset.points) >= 4)",
            timeout=30_000,
        )
    except Exception as e:
        raise AssertionError(f"no GPU cards: {panel.inner_text()}\n{gpu_lab.log_text()}") from e
    cards = gpus.evaluate(GPU_CARDS_JS)
    assert [c["gpu"] for c in cards] == ["0", "1"], cards
    assert all("NVIDIA H100 80GB HBM3" in c["title"] for c in cards), cards
    hot = cards[0]
    assert hot["gauges"][0] == "util: 98%" and hot["gauges"][2] == "temp: 88 °C", hot
    assert hot["gauges"][1] == "mem: 67.0 GiB / 80.0 GiB", hot
    assert hot["gauges"][3] == "power: 690 W / 700 W", hot
    assert len(hot["points"]) == 4 and min(hot["points"]) >= 4, hot
    assert hot["alerts"] == [["temperature", "GPU 0 is at 88 C (alert at 85 C)"]], hot
    # GPU 1 is idle at 0 %: its idle time is priced at the catalogue's H100 GPU-hour.
    idle = cards[1]["idle"]
    assert idle.startswith("Idle ") and "/GPU-hour" in idle and "$6.88" in idle, idle
    waste = float(gpus.locator("[data-waste]").get_attribute("data-waste"))
    assert waste > 0, gpus.inner_text()
    gpus_shot = tmp_path / "panel-gpus.png"
    panel.screenshot(path=str(gpus_shot))

    # The finished job's view: a chart per scalar, a line per rank, NaN left out.
    manager.wait("charted", timeout=90)
    panel.locator('[role="tab"][data-tab="jobs"]').click()
    _row(page, "charted", "Succeeded").wait_for(timeout=60_000)
    _row(page, "charted").click()
    detail = panel.locator('.jp-WorkbenchPanel-detail[data-job="charted"]')
    loss = detail.locator('figure[data-chart="loss"]')
    loss.wait_for(timeout=30_000)
    detail.locator('figure[data-chart="lr"][data-drawn="40"]').wait_for(timeout=30_000)
    lines = loss.locator("path[data-series]")
    assert lines.count() == 2
    for i in range(2):
        assert lines.nth(i).get_attribute("data-drawn") == "19"
        assert lines.nth(i).get_attribute("data-skipped") == "1"
        d = lines.nth(i).get_attribute("d") or ""
        assert d.count("M") == 2 and "NaN" not in d and "Infinity" not in d, d
    # The script prints nothing: the log view says so instead of showing an empty box.
    silent = detail.locator("[data-log-empty]")
    silent.wait_for(timeout=30_000)
    assert silent.inner_text() == "Rank 0 has written no output.", silent.inner_text()
    assert detail.locator("pre.jp-WorkbenchPanel-log").is_hidden()
    job_shot = tmp_path / "panel-job.png"
    detail.screenshot(path=str(job_shot))

    # The dark theme: the panel's colours follow JupyterLab's CSS variables.
    panel.locator('[role="tab"][data-tab="gpus"]').click()
    light = panel.evaluate("el => getComputedStyle(el).backgroundColor")
    _palette(page, "JupyterLab Dark", "apputils:change-theme")
    page.locator('body[data-jp-theme-name="JupyterLab Dark"]').wait_for(
        state="attached", timeout=30_000
    )
    page.wait_for_function(
        "light => getComputedStyle(document.querySelector('#jp-workbench-panel'))"
        ".backgroundColor !== light",
        arg=light,
        timeout=15_000,
    )
    dark = panel.evaluate(
        """el => { const card = el.querySelector('.jp-WorkbenchPanel-card h4');
                   return [getComputedStyle(el).backgroundColor, getComputedStyle(card).color]; }"""
    )
    assert _luminance(dark[0]) < 0.3 < _luminance(dark[1]), (light, dark)
    dark_shot = tmp_path / "panel-dark.png"
    panel.screenshot(path=str(dark_shot))
    assert panel.locator('[role="alert"]').count() == 0, panel.inner_text()
    _save({"panel-gpus.png": gpus_shot, "panel-job.png": job_shot, "panel-dark.png": dark_shot})

    # Back in the job view (the Jobs tab kept it): "open in notebook" with no notebook open
    # makes a new one holding the job's code.
    panel.locator('[role="tab"][data-tab="jobs"]').click()
    detail.get_by_label("Open charted in a notebook").click()
    status = detail.locator("[data-notebook-status]")
    status.wait_for(timeout=30_000)
    assert status.inner_text().startswith("Opened a new notebook Untitled"), status.inner_text()
    cell = page.locator(".jp-Notebook .jp-Cell .jp-InputArea-editor").first
    cell.wait_for(timeout=30_000)
    assert 'workbench.get("charted")' in cell.inner_text(), cell.inner_text()
    # Let its kernel finish starting: a server stopped mid-launch waits out the fixture's
    # 15 s before it is killed.
    page.locator(".jp-StatusBar-TextItem", has_text="Idle").first.wait_for(timeout=60_000)


@pytest.mark.slow
def test_gpus_tab_without_a_gpu_and_the_datasets_tab(
    plain_lab: Lab, browser_page: Any, manager: JobManager
) -> None:
    page = browser_page
    data = plain_lab.root / "data"
    (data / "raw").mkdir(parents=True)
    (data / "train.csv").write_text("x,y\n" + "".join(f"{i},{i * i}\n" for i in range(100)))
    (data / "raw" / "notes.txt").write_text("hello\n")
    panel = _open_tab(page, plain_lab, "workbench:open-gpus", "Workbench: Open GPUs")

    # No GPU: the very line `workbench top` prints for this host.
    reason = manager.nodes()[0].gpu_reason
    assert reason, "this test expects a machine without NVIDIA GPUs"
    line = panel.locator(".jp-WorkbenchPanel-nogpu")
    line.wait_for(timeout=30_000)
    assert line.inner_text() == f"GPUs: none - {reason}", line.inner_text()
    assert panel.locator(".jp-WorkbenchPanel-card").count() == 0

    # Datasets: the server's root folder (no stores configured), a folder, sizes, a preview.
    panel.locator('[role="tab"][data-tab="datasets"]').click()
    folder = panel.locator(f'.jp-WorkbenchPanel-folder[data-url="{plain_lab.root}"]')
    folder.locator('tr[data-entry="data"][data-type="directory"]').wait_for(timeout=30_000)
    folder.get_by_label("Open folder data").click()
    inside = panel.locator(f'.jp-WorkbenchPanel-folder[data-url="{data}"]')
    csv_size = (data / "train.csv").stat().st_size
    inside.locator(f'tr[data-entry="train.csv"] td[data-size="{csv_size}"]').wait_for(
        timeout=30_000
    )
    rows = inside.locator("tbody tr[data-entry]")
    assert [rows.nth(i).get_attribute("data-entry") for i in range(rows.count())] == [
        "raw",
        "train.csv",
    ]
    total = csv_size + (data / "raw" / "notes.txt").stat().st_size
    inside.locator(f'[data-usage="{total}"]').wait_for(timeout=30_000)
    inside.get_by_label("Preview train.csv").click()
    preview = inside.get_by_label("Preview text")
    preview.wait_for(timeout=30_000)
    assert preview.inner_text().split()[:4] == ["x", "y", "0", "0"], preview.inner_text()
    inside.get_by_label("Up one folder").click()
    folder.wait_for(timeout=10_000)
    assert panel.locator('[role="alert"]').count() == 0, panel.inner_text()
