"""Queue decision latency of the local backend with many jobs waiting for one GPU.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_queue.py [--waiting 200] [--chain 10]

A fake 1-GPU host (tests/fakes/nvml_pkg, in this process and every supervisor). One job
holds the GPU; ``--waiting`` jobs queue behind it, each a real detached supervisor. Then the
holder ends and the GPU passes down the queue ``--chain`` times (each job holds it 0.2 s).

A) hand-over latency: the next job's ``started_at`` minus the previous one's
   ``finished_at`` (both written by the supervisors), median and max over the chain;
   whether the jobs started in queue order;
B) the decision itself: ``gpu_queue.decide`` over the store's active rows (what a
   supervisor reads and computes under the placement lock), median of 50;
C) CPU seconds the waiting supervisors burn per second of waiting (their polls).

Run it against another checkout (e.g. main, whose waiters each poll every second and race
for the GPU) with ``--code /path/to/checkout`` to compare: the supervisors then run that
code (the store and CLI stay this checkout's).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
FAKE_PKG = ROOT / "tests" / "fakes" / "nvml_pkg"
ONE_GPU = {"gpus": [{"name": "NVIDIA A10", "steps": [{"utilization": 0}]}], "step_seconds": 1.0}


def main() -> None:
    """Run the benchmark and print one JSON object of results."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--waiting", type=int, default=200)
    ap.add_argument("--chain", type=int, default=10)
    ap.add_argument("--code", default=str(ROOT), help="checkout whose supervisors run")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-queue-"))
    (tmp / "host.json").write_text(json.dumps(ONE_GPU))
    os.environ.update(
        WORKBENCH_HOME=str(tmp / "home"),
        WORKBENCH_CONFIG=str(tmp / "none.yaml"),
        WORKBENCH_FAKE_NVML=str(tmp / "host.json"),
        PYTHONPATH=os.pathsep.join([str(FAKE_PKG), args.code]),
    )
    sys.path[:0] = [str(FAKE_PKG), str(ROOT)]
    # Supervisors start with `python -m`, which puts the working directory first on
    # sys.path: run from the temp folder so they import --code's workbench, not the cwd's.
    os.chdir(tmp)
    from workbench.backends import gpu_queue
    from workbench.backends.gpu_queue import decide
    from workbench.manager import JobManager
    from workbench.spec import JobStatus, TrainSpec

    m = JobManager()
    release = tmp / "release"
    hold = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.01)"

    def job(name: str, code: str) -> TrainSpec:
        return TrainSpec(command=[sys.executable, "-c", code], name=name, gpus=1, runtime="process")

    m.submit(job("holder", hold))
    names = [f"w{i:03d}" for i in range(args.waiting)]
    t0 = time.time()
    for name in names:
        m.submit(job(name, "import time; time.sleep(0.2)"))
    deadline = time.time() + 600
    while time.time() < deadline:  # every supervisor is up and queued
        waiting = [
            r
            for r in m.store.active_rows(backend="local")
            if "waiting for GPUs" in (r["message"] or "")
        ]
        if len(waiting) == args.waiting:
            break
        time.sleep(0.5)
    queued_s = time.time() - t0
    sups = [psutil.Process(r["details"]["supervisor_pid"]) for r in m.store.active_rows(backend="local")
            if r["name"] in set(names)]  # fmt: skip
    rss = statistics.median(p.memory_info().rss for p in sups) / 2**20
    # Steady state: past one fallback poll after the last waiter's "Queued" write, then
    # 10 s (about 3 polls of each waiter).
    time.sleep(gpu_queue.POLL_SECONDS + 1.0)
    cpu0 = sum(p.cpu_times().user + p.cpu_times().system for p in sups)
    time.sleep(10.0)
    cpu_per_s = (sum(p.cpu_times().user + p.cpu_times().system for p in sups) - cpu0) / 10.0
    rows = m.store.active_rows(backend="local")
    costs = []
    for _ in range(50):
        t = time.perf_counter()
        decide(m.store.active_rows(backend="local"), [0])
        costs.append(time.perf_counter() - t)
    release.touch()
    order: list[str] = ["holder"]
    finished = {}
    while len(order) <= args.chain and time.time() < deadline:
        for r in m.store.list(status=["Running", "Succeeded"]):
            if r.name not in order and r.started_at:
                order.append(r.name)
            if r.finished_at:
                finished[r.name] = r
        time.sleep(0.02)
    for name in order:
        finished[name] = m.wait(name, timeout=120)
    gaps = [
        (finished[b].started_at or 0) - (finished[a].finished_at or 0)
        for a, b in itertools.pairwise(order)
    ]
    for r in m.list(status=["Pending", "Running"]):
        m.cancel(r.name, wait=0)
    result = {
        "waiting": args.waiting,
        "code": args.code,
        "queued_all_s": round(queued_s, 1),
        "supervisor_rss_mib": round(rss, 1),
        "waiters_cpu_s_per_s": round(cpu_per_s, 3),
        "decision_ms_median": round(statistics.median(costs) * 1000, 2),
        "rows": len(rows),
        "handover_ms_median": round(statistics.median(gaps) * 1000, 1),
        "handover_ms_max": round(max(gaps) * 1000, 1),
        "served_in_queue_order": order[1:] == names[: len(order) - 1],
        "served": order[1:],
        "status": {s.value: m.store.count([s.value]) for s in JobStatus},
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
