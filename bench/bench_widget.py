"""Notebook widget traffic while following a chatty job, and the cost of run.log.

Part 1, in a real kernel (jupyter_client, the wire a notebook frontend listens on): a job
writes 10,000 log lines/s and reports a scalar per line with run.log. We count what the
kernel sends on IOPub (messages and exact wire bytes per second), the kernel's CPU, and
how long a new cell (``1+1``) takes to answer, for
  A. the job's live widget (``display(job)``), and
  B. what a user does without it: follow the log into the cell output
     (``for line in job.logs(follow=True): print(line)`` in a background thread).
Goal for A: <= 5 updates/s, < 50 KB/s, a new cell answers in < 100 ms.

Part 2: a million ``run.log`` calls inside a job, against the naive alternative (one
``json.dumps`` + write per call).

    .venv/bin/python bench/bench_widget.py [--seconds 15]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import psutil
import zmq
from jupyter_client.manager import KernelManager

CHATTY = """
import sys, time
from workbench import run
rate, seconds = int(sys.argv[1]), float(sys.argv[2])
batch = rate // 100  # 100 bursts a second
write = sys.stdout.write
start = time.time()
i = 0
while time.time() - start < seconds:
    tick = time.time()
    for _ in range(batch):
        i += 1
        write(f"rank 0 step {i} loss {1.0 / i:.6f} throughput 1234.5 samples/s\\n")
        run.log(step=i, loss=1.0 / i)
    sys.stdout.flush()
    time.sleep(max(0.0, 0.01 - (time.time() - tick)))
print(f"wrote {i} lines in {time.time() - start:.1f}s", flush=True)
"""


def measure(km: KernelManager, kc: Any, seconds: float) -> dict[str, float]:
    """Count IOPub traffic, kernel CPU and ``1+1`` latency for ``seconds``."""
    iopub = kc.iopub_channel.socket
    shell = kc.shell_channel.socket
    poller = zmq.Poller()
    poller.register(iopub, zmq.POLLIN)
    poller.register(shell, zmq.POLLIN)
    kernel = psutil.Process(km.provisioner.process.pid)
    cpu0 = sum(kernel.cpu_times()[:2])
    counts: dict[str, int] = {}
    wire = 0
    latencies: list[float] = []
    start = time.time()
    next_ping, pending = start + 0.5, None
    while (now := time.time()) < start + seconds or pending:
        if pending is None and now >= next_ping and now < start + seconds:
            pending = (kc.execute("1+1", silent=False, store_history=False), time.perf_counter())
        for sock, _ in poller.poll(50):
            frames = sock.recv_multipart()
            if sock is iopub:
                wire += sum(len(f) for f in frames)
                _, parts = kc.session.feed_identities(frames)
                msg = kc.session.deserialize(parts, content=False)
                kind = msg["header"]["msg_type"]
                counts[kind] = counts.get(kind, 0) + 1
            else:
                _, parts = kc.session.feed_identities(frames)
                msg = kc.session.deserialize(parts)
                if pending and msg["parent_header"].get("msg_id") == pending[0]:
                    latencies.append(time.perf_counter() - pending[1])
                    pending = None
                    next_ping = time.time() + 1.0
    cpu = sum(kernel.cpu_times()[:2]) - cpu0
    comm = counts.get("comm_msg", 0)
    return {
        "updates_per_s": comm / seconds,
        "messages_per_s": sum(counts.values()) / seconds,
        "stream_per_s": counts.get("stream", 0) / seconds,
        "kb_per_s": wire / seconds / 1024,
        "kernel_cpu_pct": 100 * cpu / seconds,
        "cell_ms_median": 1000 * statistics.median(latencies) if latencies else float("nan"),
        "cell_ms_max": 1000 * max(latencies) if latencies else float("nan"),
    }


def run_cell(kc: Any, code: str, timeout: float = 120) -> None:
    """Execute ``code`` and fail loudly if it raised."""
    reply = kc.execute_interactive(code, timeout=timeout, output_hook=lambda msg: None)
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"cell failed: {reply['content']}")


def widget_traffic(seconds: float, rate: int) -> dict[str, Any]:
    """Part 1: phase A (widget) then phase B (log printed into the cell) on one chatty job."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-widget-"))
    (tmp / "chatty.py").write_text(textwrap.dedent(CHATTY))
    env = dict(os.environ, WORKBENCH_HOME=str(tmp / "home"))
    for var in ("JUPYTER_CONFIG_DIR", "JUPYTER_DATA_DIR", "JUPYTER_RUNTIME_DIR", "IPYTHONDIR"):
        env[var] = str(tmp / var.lower())
    km = KernelManager(kernel_name="python3")
    km.start_kernel(env=env, cwd=str(tmp))
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=120)
        job_seconds = 2 * seconds + 20
        run_cell(
            kc,
            "import workbench\nfrom IPython.display import display\n"
            f"job = workbench.submit(['python', 'chatty.py', '{rate}', '{job_seconds}'], name='chatty')\n"
            "import time\n"
            "while job.status.value != 'Running': time.sleep(0.1)\n"
            "time.sleep(3)\n",  # past the start, into the steady flood
        )
        run_cell(kc, "display(job)")  # the live widget, as the magic's result shows it
        widget = measure(km, kc, seconds)
        run_cell(kc, "job._widget.close()")
        run_cell(
            kc,
            "import threading\n"
            "def _follow():\n"
            "    for line in job.logs(follow=True, tail=0): print(line)\n"
            "threading.Thread(target=_follow, daemon=True).start()",
        )
        printed = measure(km, kc, seconds)
        run_cell(kc, "job.cancel()")
        log = tmp / "home" / "jobs" / "chatty" / "logs" / "rank-0.log"
        lines = sum(1 for _ in open(log, "rb"))
        record = json.loads(
            subprocess.run(
                [sys.executable, "-m", "workbench.cli", "get", "chatty", "-o", "json"],
                env=env, capture_output=True, text=True, check=True,
            ).stdout
        )  # fmt: skip
        achieved = lines / max(record["elapsed"], 1e-9)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
    return {"widget": widget, "printed": printed, "job_lines_per_s": achieved}


NAIVE = """
import json, os, time
path = os.path.join(os.environ["WORKBENCH_JOB_DIR"], "naive.jsonl")
t = time.perf_counter()
with open(path, "a") as f:
    for i in range(1000000):
        f.write(json.dumps({"time": time.time(), "rank": 0, "step": i, "total": 1000000,
                            "loss": 0.5 / (i + 1), "acc": 0.9}) + "\\n")
print(time.perf_counter() - t)
"""

RUN_LOG = """
import time
from workbench import run
t = time.perf_counter()
for i in range(1000000):
    run.log(step=i, total=1000000, loss=0.5 / (i + 1), acc=0.9)
run.flush()
print(time.perf_counter() - t)
"""


def run_log_cost() -> dict[str, float]:
    """Part 2: seconds for a million calls, workbench.run.log vs a json line per call."""
    out = {}
    with tempfile.TemporaryDirectory() as job_dir:
        for label, code, extra in (
            ("run_log_outside_s", RUN_LOG, {}),
            ("run_log_inside_s", RUN_LOG, {"WORKBENCH_JOB_DIR": job_dir, "WORKBENCH_RANK": "0"}),
            (
                "run_log_other_rank_s",
                RUN_LOG,
                {"WORKBENCH_JOB_DIR": job_dir, "WORKBENCH_RANK": "1"},
            ),
            ("naive_json_lines_s", NAIVE, {"WORKBENCH_JOB_DIR": job_dir}),
        ):
            env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_")} | extra
            res = subprocess.run(
                [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
            )
            out[label] = float(res.stdout.strip())
    return out


def main() -> None:
    """Run both parts and print a JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seconds", type=float, default=15.0, help="measurement window per phase")
    ap.add_argument("--rate", type=int, default=10_000, help="log lines per second the job writes")
    args = ap.parse_args()
    result: dict[str, Any] = {"run_log": run_log_cost()}
    result["traffic"] = widget_traffic(args.seconds, args.rate)
    w, p = result["traffic"]["widget"], result["traffic"]["printed"]
    result["ratios_printed_over_widget"] = {
        "kb_per_s": p["kb_per_s"] / max(w["kb_per_s"], 1e-9),
        "kernel_cpu": p["kernel_cpu_pct"] / max(w["kernel_cpu_pct"], 1e-9),
    }
    r = result["run_log"]
    result["ratios_naive_over_run_log"] = r["naive_json_lines_s"] / r["run_log_inside_s"]
    result["goals_met"] = {
        "updates_per_s<=5": w["updates_per_s"] <= 5,
        "kb_per_s<50": w["kb_per_s"] < 50,
        "cell_ms_max<100": w["cell_ms_max"] < 100,
        "run_log_1M<1s": r["run_log_inside_s"] < 1.0,
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
