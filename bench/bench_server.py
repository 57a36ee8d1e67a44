"""The Jupyter server API under load, against what a user would run instead, in one run.

    .venv/bin/python bench/bench_server.py [--jobs 1000] [--requests 60] [--followers 50]

A real `jupyter server` (127.0.0.1, token auth, base_url /bench/) with the workbench
extension, on a private WORKBENCH_HOME holding --jobs job records (inserted through
JobStore, each with a rank and two events).

1) GET {base}workbench/api/jobs (default page of 100, and ?limit=1000): p50/p95 over
   --requests calls, against `workbench list -o json` (the CLI a user runs instead; its
   wall time includes interpreter start) and JobManager.list() in-process (the floor).
2) Event-loop lag while --followers clients follow a live job's log (follow=true): the
   latency of a request answered on the loop without threads (GET .../specs), idle and
   during the streams; the lag is the difference, reported with the ratio to idle.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

BIN = Path(sys.executable).parent
BASE = "/bench/"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fill_store(home: Path, n: int) -> None:
    """Insert ``n`` finished jobs straight into the store (fast; no processes)."""
    from workbench.spec import JobEvent, JobRecord, JobStatus, RankState
    from workbench.store import JobStore

    store = JobStore(home / "jobs.db")
    now = time.time() - n
    statuses = [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]
    for i in range(n):
        name = f"bench-{i:05d}"
        record = JobRecord(
            name=name, status=statuses[i % 3], backend="local",
            spec={"command": ["python", "train.py"], "workers": 1, "image": "pytorch"},
            image="pytorch", created_at=now + i, started_at=now + i + 0.5, finished_at=now + i + 30,
            price_per_hour=1.2, job_dir=str(home / "jobs" / name),
            events=[JobEvent(now + i, "Submitted", "1 worker"), JobEvent(now + i + 30, "Finished", "done")],
        )  # fmt: skip
        store.insert(record)
        store.set_rank(name, 0, state=RankState.SUCCEEDED, exit_code=0)


def start_server(home: Path, work: Path, port: int, token: str) -> subprocess.Popen[bytes]:
    """A real jupyter server with only the workbench extension, on loopback."""
    env = dict(os.environ, WORKBENCH_HOME=str(home), WORKBENCH_CONFIG=str(work / "none.yaml"),
               JUPYTER_CONFIG_DIR=str(work / "cfg"), JUPYTER_DATA_DIR=str(work / "data"),
               JUPYTER_RUNTIME_DIR=str(work / "rt"))  # fmt: skip
    args = [
        str(BIN / "jupyter"), "server", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--ServerApp.base_url={BASE}", f"--IdentityProvider.token={token}",
        "--ServerApp.jpserver_extensions={'workbench': True}", f"--ServerApp.root_dir={work}",
        "--allow-root",
    ]  # fmt: skip
    log = open(work / "server.log", "wb")
    proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}{BASE}workbench/api/specs"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if requests.get(url, headers={"Authorization": f"token {token}"}, timeout=2).ok:
                return proc
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    proc.terminate()
    raise SystemExit(f"server did not start; see {work / 'server.log'}")


def timed_gets(session: requests.Session, url: str, n: int) -> list[float]:
    """Wall seconds of ``n`` sequential GETs (each must succeed)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = session.get(url, timeout=60)
        out.append(time.perf_counter() - t0)
        r.raise_for_status()
    return out


def pct(values: list[float], q: float) -> float:
    """The q-quantile in milliseconds."""
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    """Run both measurements and print a JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=60)
    ap.add_argument("--followers", type=int, default=50)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wb-bench-server-"))
    home = work / "home"
    (home / "jobs").mkdir(parents=True)
    t0 = time.perf_counter()
    fill_store(home, args.jobs)
    print(f"inserted {args.jobs} jobs in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    os.environ.update(WORKBENCH_HOME=str(home), WORKBENCH_CONFIG=str(work / "none.yaml"))
    token = secrets.token_hex(16)
    port = _free_port()
    proc = start_server(home, work, port, token)
    api = f"http://127.0.0.1:{port}{BASE}workbench/api/"
    session = requests.Session()
    session.headers["Authorization"] = f"token {token}"
    results: dict[str, object] = {"jobs": args.jobs}
    try:
        timed_gets(session, api + "jobs", 3)  # warm up
        page = timed_gets(session, api + "jobs", args.requests)
        full = timed_gets(session, api + "jobs?limit=1000", max(10, args.requests // 3))
        assert session.get(api + "jobs", timeout=60).json()["total"] == args.jobs
        cli = []
        for _ in range(5):
            t = time.perf_counter()
            subprocess.run([str(BIN / "workbench"), "list", "-o", "json"], check=True,
                           stdout=subprocess.DEVNULL, env=dict(os.environ))  # fmt: skip
            cli.append(time.perf_counter() - t)
        from workbench.manager import JobManager

        manager = JobManager()
        direct = []
        for _ in range(10):
            t = time.perf_counter()
            manager.list()
            direct.append(time.perf_counter() - t)
        results["get_jobs_page100_ms"] = {"p50": pct(page, 0.5), "p95": pct(page, 0.95)}
        results["get_jobs_limit1000_ms"] = {"p50": pct(full, 0.5), "p95": pct(full, 0.95)}
        results["cli_list_json_ms_p50"] = pct(cli, 0.5)
        results["manager_list_inprocess_ms_p50"] = pct(direct, 0.5)
        results["ratio_api_page_to_cli"] = round(pct(page, 0.5) / pct(cli, 0.5), 3)
        results["follow"] = follow_lag(session, api, args.followers)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    print(json.dumps(results, indent=2))


def follow_lag(session: requests.Session, api: str, followers: int) -> dict[str, object]:
    """Loop-bound request latency idle and while ``followers`` streams follow a live log."""
    idle = timed_gets(session, api + "specs", 60)
    spec = {
        "name": "bench-talker",
        "command": [sys.executable, "-u", "-c",
                    "import time\nfor i in range(400):\n    print('x' * 60, i, flush=True)\n    time.sleep(0.025)"],
    }  # fmt: skip
    r = session.post(api + "jobs", json=spec, timeout=60)
    r.raise_for_status()
    counts = [0] * followers
    headers = dict(session.headers)

    def follow(i: int) -> None:
        with requests.get(
            api + "jobs/bench-talker/logs?follow=true", headers=headers, stream=True, timeout=120
        ) as s:
            for line in s.iter_lines():
                if line:
                    counts[i] += 1

    threads = [threading.Thread(target=follow, args=(i,), daemon=True) for i in range(followers)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # let every stream open
    busy = []
    deadline = time.time() + 8
    while time.time() < deadline:
        busy.extend(timed_gets(session, api + "specs", 1))
        time.sleep(0.05)
    for t in threads:
        t.join(timeout=60)
    return {
        "followers": followers,
        "lines_each_min": min(counts),
        "lines_each_max": max(counts),
        "idle_ms": {"p50": pct(idle, 0.5), "p99": pct(idle, 0.99)},
        "during_ms": {"p50": pct(busy, 0.5), "p99": pct(busy, 0.99), "n": len(busy)},
        "lag_ms": {"p50": pct(busy, 0.5) - pct(idle, 0.5), "p99": pct(busy, 0.99) - pct(idle, 0.5)},
        "ratio_during_to_idle_p50": round(pct(busy, 0.5) / pct(idle, 0.5), 2),
    }


if __name__ == "__main__":
    main()
