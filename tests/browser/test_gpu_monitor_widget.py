"""The GPU monitor (``%gpu_monitor``) as a data scientist sees it: JupyterLab in Chromium, on a
fake 2-GPU host (tests/fakes' NVML at the monitor's seam in the kernel).

Checks run in the DOM: a card per GPU with its name and gauges, a history chart that grows,
and the temperature alert listed. A screenshot of the cell goes to tmp_path (and to
docs/images/gpu-monitor.png with WORKBENCH_UPDATE_IMAGES=1, for the README's tour).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest

from .conftest import Lab

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"

# Two H100s: GPU 0 trains and runs hot (88 C crosses the 85 C rule), GPU 1 is lightly used.
SCENARIO = {
    "step_seconds": 0.7,
    "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * 2**30, "power_limit": 700,
         "steps": [{"utilization": u, "temperature": t, "memory_used": m * 2**30, "power": p}
                   for u, t, m, p in [(35, 52, 20, 260), (78, 64, 61, 520), (96, 79, 66, 655),
                                      (91, 84, 66, 640), (98, 88, 67, 690)]]},
        {"name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * 2**30, "power_limit": 700,
         "steps": [{"utilization": u, "temperature": t, "memory_used": 9 * 2**30, "power": p}
                   for u, t, p in [(5, 41, 90), (22, 46, 180), (31, 49, 210), (18, 47, 170)]]},
    ],
}  # fmt: skip

SETUP = f"""\
import sys
sys.path.insert(0, {str(ROOT)!r})  # tests.fakes: this test's fake NVML
from tests.fakes.fake_nvml import FakeNvml
from workbench.monitor import _nvml, sampler

_nvml.pynvml = FakeNvml({SCENARIO!r})
_nvml.reset()
sampler.reset_host_sampler()
%load_ext workbench
"""


def _notebook(root: Path) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [nbformat.v4.new_code_cell(SETUP), nbformat.v4.new_code_cell("%gpu_monitor")]
    nbformat.write(nb, root / "monitor.ipynb")
    return "monitor.ipynb"


PROBE_JS = r"""
cell => ({
  titles: [...cell.querySelectorAll('b')].map(b => b.parentElement.textContent.trim())
            .filter(t => /^GPU \d/.test(t)),
  header: (cell.querySelector('b') || {parentElement: {textContent: ''}}).parentElement.textContent,
  gauges: [...cell.querySelectorAll('.widget-label')].map(l => l.textContent),
  points: [...cell.querySelectorAll('svg[data-points]')].map(s => Number(s.dataset.points)),
  alerts: [...cell.querySelectorAll('li[data-kind]')].map(li => [li.dataset.kind, li.textContent]),
})
"""


@pytest.mark.slow
def test_gpu_monitor_in_jupyterlab(jupyter_lab: Lab, browser_page: Any, tmp_path: Path) -> None:
    page = browser_page
    cell = jupyter_lab.run_first_cells(page, _notebook(jupyter_lab.root))
    try:
        cell.locator('ul[data-alerts="1"] li[data-kind="temperature"]').wait_for(timeout=60_000)
        page.wait_for_function(
            "() => [...document.querySelectorAll('svg[data-points]')]"
            ".filter(s => Number(s.dataset.points) >= 5).length == 2",
            timeout=30_000,
        )
    except Exception as e:  # Playwright's TimeoutError: say what the server logged
        raise AssertionError(f"the monitor did not fill: {e}\n{jupyter_lab.log_text()}") from e

    probe = cell.evaluate(PROBE_JS)
    shot = tmp_path / "gpu-monitor.png"
    cell.screenshot(path=str(shot))
    if os.environ.get("WORKBENCH_UPDATE_IMAGES") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, IMAGES / "gpu-monitor.png")
    assert "GPU monitor: 2 GPU(s), sampled every 1 s" in probe["header"], probe
    assert [t.split(" NVIDIA")[0] for t in probe["titles"]] == ["GPU 0", "GPU 1"], probe
    assert all("NVIDIA H100 80GB HBM3" in t for t in probe["titles"]), probe
    assert sum(g.startswith("util ") for g in probe["gauges"]) == 2, probe["gauges"]
    assert sum(g.startswith("temp ") for g in probe["gauges"]) == 2, probe["gauges"]
    assert len(probe["points"]) == 2 and min(probe["points"]) >= 5, probe
    assert probe["alerts"] == [["temperature", "GPU 0 is at 88 C (alert at 85 C)"]], probe
