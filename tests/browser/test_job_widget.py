"""The job widget as a data scientist sees it: JupyterLab in Chromium, a real ``%%gpu_train``.

Checks run in the DOM (not on pixels): the log box follows its newest line, each chart shows
its whole title and a step axis, the rank table's cells are apart, and a finished job shows
its status as a badge with no button left over. Screenshots of the cell go to tmp_path (and
to docs/images with WORKBENCH_UPDATE_IMAGES=1).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import nbformat
import pytest

from workbench.manager import JobManager

from .conftest import Lab

ROOT = Path(__file__).resolve().parents[2]
IMAGES = ROOT / "docs" / "images"
JOB = "browser-demo"
FIRST, TOTAL = 30, 40  # steps before the job waits for the test, steps in all

# The job pauses after step FIRST until the test has looked at it running (the file
# "go-on" appears beside the notebook), so the "running" checks never race the job's end.
CELL = f"""\
%%gpu_train --workers 2 --name {JOB}
import os, time
from workbench import run

rank = os.environ["RANK"]
for step in range(1, {TOTAL} + 1):
    loss = 2.0 / (1 + 0.15 * step)
    run.log(step=step, total={TOTAL}, loss=loss, lr=0.1 * 0.97**step)
    print(f"rank {{rank}} step {{step:>2}}/{TOTAL} loss {{loss:.4f}}", flush=True)
    time.sleep(0.02)
    while step == {FIRST} and not os.path.exists("go-on"):
        time.sleep(0.1)
print(f"rank {{rank}} done", flush=True)
"""

# What the page reports about the widget in cell 1 (evaluated in the browser).
PROBE_JS = """
cell => {
  const rectOf = node => { const r = document.createRange(); r.selectNodeContents(node);
                           return r.getBoundingClientRect(); };
  const inside = (r, box) => r.top >= box.top - 1 && r.bottom <= box.bottom + 1 &&
                             r.left >= box.left - 1 && r.right <= box.right + 1;
  const out = {};
  const pre = cell.querySelector('[data-lines] pre') || cell.querySelector('pre[data-lines]');
  const box = pre.closest('[data-lines]').matches('pre') ? pre : pre.closest('[data-lines]');
  const text = pre.textContent, boxRect = box.getBoundingClientRect();
  const lineRange = (start, end) => { const r = document.createRange();
    r.setStart(pre.firstChild, start); r.setEnd(pre.firstChild, end);
    return r.getBoundingClientRect(); };
  const lastStart = text.lastIndexOf('\\n') + 1, firstEnd = text.indexOf('\\n');
  out.log = {scrollTop: box.scrollTop, scrollHeight: box.scrollHeight,
             clientHeight: box.clientHeight, lastLine: text.slice(lastStart),
             lastVisible: inside(lineRange(lastStart, text.length), boxRect),
             firstVisible: inside(lineRange(0, firstEnd), boxRect)};
  out.charts = [...cell.querySelectorAll('svg[data-series]')].map(svg => {
    const panel = svg.closest('[data-chart]') || svg, p = panel.getBoundingClientRect();
    const title = panel.querySelector('[data-chart-title]') || svg.querySelector('text');
    const axis = panel.querySelector('[data-axis="step"]');
    return {series: svg.dataset.series, lastStep: svg.dataset.lastStep,
            title: title ? title.textContent : '',
            clipped: [...panel.querySelectorAll('text, [data-chart-title]')]
                       .filter(t => !inside(t.getBoundingClientRect(), p))
                       .map(t => t.textContent),
            ticks: axis ? [...axis.querySelectorAll('[data-tick]')].map(t => t.textContent) : [],
            axisLabel: axis ? (axis.querySelector('[data-axis-label]') || {}).textContent : null};
  });
  out.rows = [...cell.querySelectorAll('tr[data-rank]')].map(tr => {
    const cells = [...tr.querySelectorAll('td')];
    const gaps = [];
    for (let i = 0; i + 1 < cells.length; i++) {
      if (!cells[i].textContent || !cells[i + 1].textContent) continue;
      gaps.push(rectOf(cells[i + 1]).left - rectOf(cells[i]).right);
    }
    return {cells: cells.map(c => c.textContent), gaps};
  });
  out.buttons = [...cell.querySelectorAll('button')]
    .filter(b => b.offsetParent !== null)  // rendered (display:none has none)
    .map(b => ({text: b.textContent.trim(), disabled: b.disabled}));
  const badge = cell.querySelector('[data-status]');
  out.badge = badge ? {status: badge.dataset.status, tag: badge.tagName,
                       text: badge.textContent.trim()} : null;
  return out;
}
"""


def _notebook(root: Path) -> str:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext workbench"),
        nbformat.v4.new_code_cell(CELL),
    ]
    nbformat.write(nb, root / "widget.ipynb")
    return "widget.ipynb"


def _save(cell: Any, tmp_path: Path, name: str) -> Path:
    shot = tmp_path / name
    cell.screenshot(path=str(shot))
    if os.environ.get("WORKBENCH_UPDATE_IMAGES") == "1":
        IMAGES.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, IMAGES / name)
    return shot


def _check_log(probe: dict[str, Any], last_line: str) -> None:
    log = probe["log"]
    assert log["scrollHeight"] > log["clientHeight"], f"log box does not overflow: {log}"
    assert log["lastLine"] == last_line, log
    assert log["lastVisible"], f"the newest log line is scrolled out of view: {log}"
    assert not log["firstVisible"], f"the log box shows its oldest line, not its newest: {log}"


def _check_charts(probe: dict[str, Any], last_step: int) -> None:
    charts = {c["series"]: c for c in probe["charts"]}
    assert set(charts) == {"loss", "lr"}, probe["charts"]
    for name, chart in charts.items():
        assert chart["title"].startswith(name) and f"step {last_step}" in chart["title"], chart
        assert chart["clipped"] == [], f"{name}: text cut off by the panel: {chart}"
        assert chart["axisLabel"] == "step", f"{name}: no step axis: {chart}"
        ticks = [float(t) for t in chart["ticks"]]
        assert len(ticks) >= 2 and ticks == sorted(ticks), chart
        assert 1 <= ticks[0] and ticks[-1] <= last_step, chart


def _check_table(probe: dict[str, Any], state: str) -> None:
    rows = probe["rows"]
    assert [r["cells"][:2] for r in rows] == [["0", state], ["1", state]], rows
    for row in rows:
        assert row["gaps"] and min(row["gaps"]) >= 8, f"columns run together: {row}"


@pytest.mark.slow
def test_job_widget_in_jupyterlab(
    jupyter_lab: Lab, browser_page: Any, manager: JobManager, tmp_path: Path
) -> None:
    page = browser_page
    cell = jupyter_lab.run_first_cells(page, _notebook(jupyter_lab.root))
    step = f"rank 0 step {FIRST}/{TOTAL}"
    try:
        cell.locator("[data-lines]", has_text=step).wait_for(timeout=60_000)
        cell.locator(f'svg[data-series="lr"][data-last-step="{FIRST}"]').wait_for(timeout=15_000)
    except Exception as e:  # Playwright's TimeoutError: say what the server logged
        raise AssertionError(
            f"the widget did not show step {FIRST}: {e}\n{jupyter_lab.log_text()}"
        ) from e

    # Running: the newest line in view, charts whole with a step axis, Cancel offered.
    running = cell.evaluate(PROBE_JS)
    _save(cell, tmp_path, "job-widget-running.png")
    assert running["badge"] == {"status": "Running", "tag": "SPAN", "text": "Running"}, running
    _check_log(running, f"rank 0 step {FIRST}/{TOTAL} loss {2.0 / (1 + 0.15 * FIRST):.4f}")
    _check_charts(running, FIRST)
    _check_table(running, "Running")
    assert {"text": "Cancel", "disabled": False} in running["buttons"], running["buttons"]

    (jupyter_lab.root / "go-on").touch()  # the job's working dir is the notebook's
    assert manager.wait(JOB, timeout=60).status.value == "Succeeded"
    cell.locator('[data-status="Succeeded"]').wait_for(timeout=30_000)
    cell.locator("[data-lines]", has_text="rank 0 done").wait_for(timeout=30_000)
    cell.locator(f'svg[data-series="lr"][data-last-step="{TOTAL}"]').wait_for(timeout=15_000)

    # Finished: the status is a badge, and no button is left that only repeats it.
    done = cell.evaluate(PROBE_JS)
    _save(cell, tmp_path, "job-widget-finished.png")
    assert done["badge"] == {"status": "Succeeded", "tag": "SPAN", "text": "Succeeded"}, done
    statuses = {"Pending", "Running", "Succeeded", "Failed", "Cancelled"}
    assert not [b for b in done["buttons"] if b["text"] in statuses], done["buttons"]
    assert not [b for b in done["buttons"] if "Cancel" in b["text"] and not b["disabled"]]
    _check_log(done, "rank 0 done")
    _check_charts(done, TOTAL)
    _check_table(done, "Succeeded")


def test_a_missing_browser_fails_saying_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from . import conftest

    monkeypatch.setenv("WORKBENCH_CHROMIUM", "/nonexistent/chromium")
    monkeypatch.setattr(conftest.os, "access", lambda *_: False)
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium"):
        conftest.chromium_path()
    with pytest.raises(pytest.fail.Exception, match="pip install playwright"):
        conftest._require("playwright_missing_for_this_test", "pip install playwright")
