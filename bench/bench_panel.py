"""The JupyterLab side panel in a real browser: Debian's Chromium (Playwright) against a real
``jupyter lab`` whose extension is installed from the built wheel.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_panel.py [--repeat 5] [--idle-seconds 30]
        [--stream-seconds 8] [--rate 10000]

A) opening the panel -> first job rows, with 1,000 jobs in the store (goal < 1 s): a
   MutationObserver stamps the first row; the clock starts at the click on the sidebar's
   GPU tab (a fresh workspace each time, so the panel starts closed). Median and range.
B) a job writes --rate log lines/s for --stream-seconds into the followed job view: the
   longest main-thread task (PerformanceObserver 'longtask'), long tasks (> 50 ms), the
   animation frames counted against 60 per second (frames dropped), and that the view ends
   on the job's last line.
C) bytes received over the events WebSocket per minute: the panel idle for --idle-seconds,
   and while the job of B runs (its log itself goes over HTTP; it logs two scalars 10
   times a second, which the open job view's charts receive as metrics frames).
D) the bundle: the wheel's static/*.js, raw and gzipped (React and JupyterLab are shared
   from the host page, not shipped).

Prints one JSON object (and a table); docs/benchmarks.md has the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.labextension.wheel import EXT, built_wheel, installed_alone  # noqa: E402
from workbench.manager import JobManager  # noqa: E402
from workbench.settings import Settings  # noqa: E402
from workbench.spec import JobRecord, JobStatus, TrainSpec  # noqa: E402

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
]  # fmt: skip
TAB = '.jp-SideBar [data-id="jp-workbench-panel"]'

FIRST_ROW_JS = """
() => { window.__wbFirstRow = null;
  new MutationObserver((_, obs) => {
    if (document.querySelector('.jp-WorkbenchPanel-row')) {
      window.__wbFirstRow = performance.now(); obs.disconnect(); }
  }).observe(document.body, {childList: true, subtree: true}); }
"""
PERF_JS = """
() => { window.__wbLong = []; window.__wbFrames = 0;
  new PerformanceObserver(list => { for (const e of list.getEntries())
    window.__wbLong.push(e.duration); }).observe({type: 'longtask', buffered: false});
  const tick = () => { window.__wbFrames += 1; requestAnimationFrame(tick); };
  requestAnimationFrame(tick); }
"""
CHATTY = """\
import sys, time
from workbench import run
rate, seconds = int(sys.argv[1]), float(sys.argv[2])
batch, n, step = rate // 100, 0, 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    tick = time.monotonic()
    sys.stdout.write("".join(f"line {n + i} of a chatty job\\n" for i in range(batch)))
    sys.stdout.flush()
    n += batch
    step += 1
    if step % 10 == 0:  # scalars 10 times a second, as a training loop logs them
        run.log(step=step, loss=1.0 / step, lr=0.1)
    time.sleep(max(0.0, 0.01 - (time.monotonic() - tick)))
run.flush()
print(f"done after {n} lines", flush=True)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_lab(tmp: Path, share: Path) -> tuple[subprocess.Popen[bytes], str, str, Path]:
    """jupyter lab on 127.0.0.1 with every Jupyter dir under tmp and the wheel's share first."""
    root = tmp / "root"
    root.mkdir()
    settings = tmp / "lab-settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env = {
        **os.environ,
        "JUPYTER_PATH": str(share),
        "JUPYTER_CONFIG_DIR": str(tmp / "config"),
        "JUPYTER_DATA_DIR": str(tmp / "data"),
        "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
        "IPYTHONDIR": str(tmp / "ipython"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp / "lab-settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp / "workspaces"),
    }
    token, port = secrets.token_hex(16), _free_port()
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
        "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}", "--LabApp.news_url=",
    ]  # fmt: skip
    log = open(tmp / "lab.log", "wb")  # the server writes it for as long as it runs
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=root, env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2):
                return process, url, token, root
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.2)
    raise SystemExit(f"jupyter lab did not start:\n{(tmp / 'lab.log').read_text()[-3000:]}")


def open_lab(page: Any, url: str, token: str) -> None:
    """A fresh workspace (the panel starts closed), Lab fully up."""
    page.goto(f"{url}/lab?reset&token={token}")
    page.locator(TAB).wait_for(timeout=60_000)
    page.locator(".jp-Launcher").first.wait_for(timeout=60_000)


def first_rows(page: Any, url: str, token: str, repeat: int) -> list[float]:
    """Milliseconds from the click on the sidebar tab to the first job row, per page load."""
    out = []
    for _ in range(repeat):
        open_lab(page, url, token)
        page.evaluate(FIRST_ROW_JS)
        clicked = page.evaluate("() => performance.now()")
        page.locator(TAB).click()
        page.locator(".jp-WorkbenchPanel-row").first.wait_for(timeout=30_000)
        page.locator('.jp-WorkbenchPanel-viewport[data-count="1000"]').wait_for(timeout=30_000)
        out.append(page.evaluate("() => window.__wbFirstRow") - clicked)
    return out


def bundle() -> dict[str, int]:
    """The wheel's JavaScript, raw and gzipped."""
    static = installed_alone() / EXT / "static"
    files = sorted(static.glob("*.js"))
    raw = sum(f.stat().st_size for f in files)
    zipped = sum(len(gzip.compress(f.read_bytes(), 9)) for f in files)
    return {"js_files": len(files), "js_bytes": raw, "js_gzip_bytes": zipped}


def main() -> None:
    """Run A-D and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=30.0)
    parser.add_argument("--stream-seconds", type=float, default=8.0)
    parser.add_argument("--rate", type=int, default=10_000)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    t0 = time.perf_counter()
    built_wheel()
    share = installed_alone() / "share" / "jupyter"
    wheel_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory(prefix="bench-panel-") as tmpdir:
        tmp = Path(tmpdir)
        os.environ["WORKBENCH_HOME"] = str(tmp / "wbhome")
        os.environ["WORKBENCH_CONFIG"] = str(tmp / "no-config.yaml")
        manager = JobManager(Settings.load())
        store = manager.backend().store  # type: ignore[attr-defined]  # LocalBackend's store
        for i in range(1000):
            status = (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)[i % 3]
            store.insert(JobRecord(name=f"bulk-{i:04d}", status=status, backend="local",
                                   spec={"command": ["true"], "workers": 2}, image="pytorch",
                                   created_at=1_700_000_000.0 + i))  # fmt: skip
        process, url, token, root = start_lab(tmp, share)
        try:
            with sync_playwright() as pw:
                profile = tmp / "chromium"
                context = pw.chromium.launch_persistent_context(
                    str(profile), executable_path="/usr/bin/chromium", args=FLAGS,
                    headless=True, viewport={"width": 1200, "height": 1000},
                )  # fmt: skip
                page = context.pages[0] if context.pages else context.new_page()
                rows_ms = first_rows(page, url, token, args.repeat)
                figures = stream(page, url, token, manager, root, args)
                context.close()
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
            for record in manager.list(status=["Pending", "Running", "Cancelling"]):
                manager.cancel(record.name, wait=15)
    result = {
        "first_rows_ms": {
            "median": round(statistics.median(rows_ms)),
            "min": round(min(rows_ms)),
            "max": round(max(rows_ms)),
            "runs": [round(x) for x in rows_ms],
        },
        **figures,
        "bundle": bundle(),
        "wheel_build_and_install_s": round(wheel_s, 1),
    }
    print(json.dumps(result, indent=2))


def stream(
    page: Any, url: str, token: str, manager: JobManager, root: Path, args: argparse.Namespace
) -> dict[str, Any]:
    """B and C: idle socket bytes, then a chatty job followed in its view."""
    frames: list[tuple[float, int]] = []

    def on_socket(ws: Any) -> None:
        if "workbench/api/events" in ws.url:
            ws.on("framereceived", lambda p: frames.append((time.monotonic(), len(p))))

    page.on("websocket", on_socket)
    open_lab(page, url, token)
    page.locator(TAB).click()
    panel = page.locator("#jp-workbench-panel")
    panel.locator('[data-state="live"]').wait_for(timeout=30_000)
    idle_from = time.monotonic()
    time.sleep(args.idle_seconds)  # the measured idle window itself
    idle = sum(n for t, n in frames if t >= idle_from) * 60 / args.idle_seconds

    (root / "chatty.py").write_text(CHATTY)
    page.evaluate(PERF_JS)
    busy_from = time.monotonic()
    spec = TrainSpec.from_dict(
        {"name": "chatty", "runtime": "process",
         "command": [sys.executable, "chatty.py", str(args.rate), str(args.stream_seconds)]},
        base_dir=root,
    )  # fmt: skip
    spec.working_dir = str(root)
    manager.submit(spec)
    panel.locator('.jp-WorkbenchPanel-row[data-job="chatty"]').click()
    detail = panel.locator('.jp-WorkbenchPanel-detail[data-job="chatty"]')
    detail.locator('[data-following="true"]').wait_for(timeout=30_000)
    detail.locator('.jp-WorkbenchPanel-title [data-status="Succeeded"]').wait_for(timeout=120_000)
    detail.locator(".jp-WorkbenchPanel-log", has_text="done after").wait_for(timeout=60_000)
    seconds = time.monotonic() - busy_from
    perf = page.evaluate("() => ({long: window.__wbLong, frames: window.__wbFrames})")
    busy = sum(n for t, n in frames if t >= busy_from) * 60 / seconds
    lines = detail.get_by_label("Log text").inner_text().splitlines()
    total = int(lines[-1].split()[2])
    assert lines[-2] == f"line {total - 1} of a chatty job", lines[-3:]
    return {
        "stream": {
            "log_lines": total,
            "seconds": round(seconds, 1),
            "longest_task_ms": round(max(perf["long"], default=0.0)),
            "long_tasks": len(perf["long"]),
            "frames_per_s": round(perf["frames"] / seconds, 1),
            "frames_dropped_vs_60hz": max(0, round(60 * seconds - perf["frames"])),
            "lines_kept_in_view": len(lines),
        },
        "ws_bytes_per_min": {"idle": round(idle), "busy_job": round(busy)},
    }


if __name__ == "__main__":
    main()
