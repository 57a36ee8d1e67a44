"""A job drawing a tqdm-style progress bar (20 MB of '\\r' updates, no newline) with its live
widget shown in a real kernel: how fast the kernel answers a new cell, and what the widget
costs the kernel in CPU.

The kernel is driven over jupyter_client, as a notebook frontend drives it. While the job
writes, a new cell (``1+1``) is sent every 0.5 s and timed to its reply; the kernel
process's CPU is read with psutil over the same window, and again over an idle window
with no widget (the baseline), so the widget's share is the difference.
Goal (issue 16): a new cell answers in < 100 ms; the widget costs < 5 % of a core.

    .venv/bin/python bench/bench_tqdm_widget.py [--mb 20] [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil
from jupyter_client.manager import KernelManager

TQDM = """
import sys, time
mb, seconds = float(sys.argv[1]), float(sys.argv[2])
total = int(mb * 2**20 / 100)  # one update is about 100 bytes
pause = seconds / total * 500
w = sys.stdout.write
for i in range(total):
    pct = i * 100 // total
    w(f"\\r{pct:3d}%|{'#' * (pct // 2):50s}| {i}/{total} [00:01<00:02, 9999.99it/s]  ")
    if i % 500 == 0:
        sys.stdout.flush()
        time.sleep(pause)
sys.stdout.flush()
time.sleep(3600)  # keep running: the widget stays live while we measure
"""


def run(kc: object, code: str, timeout: float = 60.0) -> float:
    """Execute ``code``; seconds to its reply."""
    t = time.perf_counter()
    msg_id = kc.execute(code)  # type: ignore[attr-defined]
    while True:
        reply = kc.get_shell_msg(timeout=timeout)  # type: ignore[attr-defined]
        if reply["parent_header"].get("msg_id") == msg_id:
            assert reply["content"]["status"] == "ok", reply["content"]
            return time.perf_counter() - t


def cpu_over(proc: psutil.Process, seconds: float, kc: object) -> tuple[float, list[float]]:
    """Percent of one core the process used over ``seconds``, and ping latencies (s)."""
    pings = []
    c0, t0 = proc.cpu_times(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        pings.append(run(kc, "1+1"))
        time.sleep(0.5)
    c1, t1 = proc.cpu_times(), time.perf_counter()
    used = (c1.user - c0.user) + (c1.system - c0.system)
    return 100 * used / (t1 - t0), pings


def main() -> None:
    """Run the benchmark and print its figures as JSON."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=float, default=20.0)
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-tqdm-"))
    (tmp / "bar.py").write_text(TQDM)
    env = {**os.environ, "WORKBENCH_HOME": str(tmp / "home")}
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[var] = str(tmp / var.lower())
    km = KernelManager(kernel_name="python3")
    km.start_kernel(cwd=str(tmp), env=env)
    kc = km.client()
    kc.start_channels()
    kc.wait_for_ready(timeout=60)
    try:
        proc = psutil.Process(km.provisioner.process.pid)  # type: ignore[union-attr]
        run(kc, "%load_ext workbench")
        idle_cpu, idle_pings = cpu_over(proc, 5, kc)
        write_s = args.seconds * 0.75  # the bar is drawn during most of the window
        run(kc, f"job = %gpu_train --name bar bar.py {args.mb} {write_s}\nfrom IPython.display "
            "import display\ndisplay(job)")  # fmt: skip
        cpu, pings = cpu_over(proc, args.seconds, kc)
        size = (tmp / "home" / "jobs" / "bar" / "logs" / "rank-0.log").stat().st_size
        run(kc, "w = job._widget\nimport time\nt = time.perf_counter(); w.refresh(); "
            "refresh = time.perf_counter() - t")  # fmt: skip
        kc.execute("print(refresh, repr(w.logs.value[-300:]))")
        out = ""
        while True:
            msg = kc.get_iopub_msg(timeout=30)
            if msg["msg_type"] == "stream":
                out += msg["content"]["text"]
                break
        run(kc, "job.cancel()")
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    refresh_s, _, shown = out.partition(" ")
    print(
        json.dumps(
            {
                "log_mb": round(size / 2**20, 1),
                "window_s": args.seconds,
                "kernel_cpu_pct_idle": round(idle_cpu, 2),
                "kernel_cpu_pct_with_widget": round(cpu, 2),
                "widget_cpu_pct": round(cpu - idle_cpu, 2),
                "new_cell_ms_median": round(1000 * statistics.median(pings), 1),
                "new_cell_ms_max": round(1000 * max(pings), 1),
                "new_cell_ms_idle_median": round(1000 * statistics.median(idle_pings), 1),
                "one_widget_refresh_ms": round(1000 * float(refresh_s), 2),
                "log_box_ends_with": shown.strip()[-120:],
                "python": sys.version.split()[0],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
