"""The server's job-change watcher: today's code against a baseline commit, side by side.

    .venv/bin/python bench/bench_watcher.py [--jobs 1000] [--seconds 20] [--requests 40]
        [--baseline d2ff5be | --baseline-path DIR]

Two real `jupyter server`s (127.0.0.1, token auth) with the workbench extension run at the
same time, so they share the machine's load: one imports this checkout, the other the
baseline (a temporary `git worktree` of --baseline, removed afterwards; or --baseline-path).
Each has its own WORKBENCH_HOME holding --jobs finished jobs (inserted through that
version's JobStore, each with a rank and two events) and one running job whose rank a
writer process (that version's JobStore, recorded as the job's supervisor so the
reconciler keeps it alive) updates every second, as a training job's supervisor does.
One WebSocket client listens on each server's event stream (the watcher runs while a
client is connected).

Measured over the same --seconds window on both servers:
- CPU seconds per second of the server process (psutil, user + system);
- store queries per second: every SQL statement the server process runs (counted with
  sqlite3's trace callback, installed by a jupyter_server_config.py before the extension
  loads; both servers are counted the same way), how many of them list the jobs, and
  SQLite's own work (virtual-machine instructions, counted by a progress handler): a
  statement that reads 1,000 rows and one that reads one count the same as queries;
- job messages the client received per second (both must see the running job change);
then GET {base}workbench/api/jobs (default page) p50/p95 over --requests calls each,
alternating between the servers. Prints a JSON summary with new/baseline ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
BASE = "/bench/"
RUNNING = "bench-running"

# Runs in each server process before the extension loads: count every SQL statement.
COUNTER_CONFIG = """
import json, os, sqlite3, threading, time
_real_connect = sqlite3.connect
_counts = {"all": 0, "listing": 0, "kops": 0}
def _trace(statement):
    _counts["all"] += 1
    if "FROM jobs" in statement and "ORDER BY created_at" in statement:
        _counts["listing"] += 1
def _kops():
    _counts["kops"] += 1
    return 0
def _connect(*args, **kwargs):
    conn = _real_connect(*args, **kwargs)
    conn.set_trace_callback(_trace)
    conn.set_progress_handler(_kops, 1000)  # SQLite's own work: per 1,000 VM instructions
    return conn
sqlite3.connect = _connect
def _dump(path=os.environ["BENCH_COUNTS"]):
    while True:
        with open(path + ".tmp", "w") as f:
            json.dump(dict(_counts, t=time.time()), f)
        os.replace(path + ".tmp", path)
        time.sleep(0.1)
threading.Thread(target=_dump, daemon=True).start()
"""

# Runs with each version's PYTHONPATH: the finished jobs.
FILL = """
import sys, time
from pathlib import Path
from workbench.spec import JobEvent, JobRecord, JobStatus, RankState
from workbench.store import JobStore
home, n = Path(sys.argv[1]), int(sys.argv[2])
store = JobStore(home / "jobs.db")
now = time.time() - n
statuses = [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED]
for i in range(n):
    name = f"bench-{i:05d}"
    store.insert(JobRecord(
        name=name, status=statuses[i % 3], backend="local",
        spec={"command": ["python", "train.py"], "workers": 1, "image": "pytorch"},
        image="pytorch", created_at=now + i, started_at=now + i + 0.5, finished_at=now + i + 30,
        price_per_hour=1.2, details={"job_dir": str(home / "jobs" / name)},
        events=[JobEvent(now + i, "Submitted", "1 worker"), JobEvent(now + i + 30, "Finished", "done")],
    ))
    store.set_rank(name, 0, state=RankState.SUCCEEDED, exit_code=0)
"""

# Runs with each version's PYTHONPATH: the running job, and its rank changing every second.
WRITER = """
import os, sys, time
from pathlib import Path
import psutil
from workbench.spec import JobEvent, JobRecord, JobStatus, RankState
from workbench.store import JobStore
home, name = Path(sys.argv[1]), sys.argv[2]
store = JobStore(home / "jobs.db")
me = psutil.Process().create_time()
now = time.time()
store.insert(JobRecord(
    name=name, status=JobStatus.RUNNING, backend="local", spec={"command": ["python", "t.py"]},
    image="pytorch", created_at=now, started_at=now, price_per_hour=1.2,
    details={"job_dir": str(home / "jobs" / name), "supervisor_pid": os.getpid(),
             "supervisor_ctime": me},
    events=[JobEvent(now, "Submitted", "1 worker"), JobEvent(now, "Started", "up")],
))
store.set_rank(name, 0, state=RankState.RUNNING, started_at=now,
               details={"pid": os.getpid(), "ctime": me})
print("ready", flush=True)
step = 0
while True:
    time.sleep(1.0)
    step += 1
    store.set_rank(name, 0, details={"step": step})
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """One version's home, writer, jupyter server and listening WebSocket client."""

    def __init__(self, label: str, code: Path, work: Path, jobs: int) -> None:
        self.label, self.code, self.work = label, code, work
        self.home = work / "home"
        (self.home / "jobs").mkdir(parents=True)
        self.counts_file = work / "counts.json"
        self.env = dict(
            os.environ,
            PYTHONPATH=str(code),
            WORKBENCH_HOME=str(self.home),
            WORKBENCH_CONFIG=str(work / "none.yaml"),
            JUPYTER_CONFIG_DIR=str(work / "cfg"),
            JUPYTER_DATA_DIR=str(work / "data"),
            JUPYTER_RUNTIME_DIR=str(work / "rt"),
            BENCH_COUNTS=str(self.counts_file),
        )
        (work / "cfg").mkdir()
        (work / "cfg" / "jupyter_server_config.py").write_text(COUNTER_CONFIG)
        # cwd: `python -c` puts it first on sys.path; it must not hold another workbench.
        subprocess.run([sys.executable, "-c", FILL, str(self.home), str(jobs)], env=self.env,
                       cwd=work, check=True)  # fmt: skip
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.procs: list[subprocess.Popen[bytes]] = []
        self.messages = 0  # job messages the WebSocket client received
        self.listening = False
        self.listen_error: BaseException | None = None

    def start(self) -> None:
        """Start the writer (the running job) and the server; wait until both are up."""
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(self.home), RUNNING],
            env=self.env, cwd=self.work, stdout=subprocess.PIPE,
        )  # fmt: skip
        self.procs.append(writer)
        assert writer.stdout is not None and writer.stdout.readline().strip() == b"ready"
        args = [
            str(BIN / "jupyter"), "server", "--no-browser", "--ip=127.0.0.1",
            f"--port={self.port}", f"--ServerApp.base_url={BASE}",
            f"--IdentityProvider.token={self.token}",
            "--ServerApp.jpserver_extensions={'workbench': True}",
            f"--ServerApp.root_dir={self.work}", "--allow-root",
        ]  # fmt: skip
        log = open(self.work / "server.log", "wb")
        self.server = subprocess.Popen(
            args, env=self.env, cwd=self.work, stdout=log, stderr=subprocess.STDOUT
        )
        self.procs.append(self.server)
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if requests.get(self.api("specs"), headers=self.headers(), timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        else:
            tail = (self.work / "server.log").read_text(errors="replace")[-3000:]
            raise SystemExit(f"{self.label} server did not start:\n{tail}")
        threading.Thread(target=self._listen_thread, daemon=True).start()
        deadline = time.time() + 30
        while not self.listening and self.listen_error is None and time.time() < deadline:
            time.sleep(0.05)
        if not self.listening:  # a silent client would report 0 messages/s as a result
            raise SystemExit(f"{self.label}: the WebSocket client did not connect: "
                             f"{self.listen_error!r}")  # fmt: skip

    def _listen_thread(self) -> None:
        try:
            asyncio.run(self._listen())
        except Exception as e:
            self.listen_error = e

    def api(self, path: str) -> str:
        """URL of a workbench API route."""
        return f"http://127.0.0.1:{self.port}{BASE}workbench/api/{path}"

    def headers(self) -> dict[str, str]:
        """The token header."""
        return {"Authorization": f"token {self.token}"}

    async def _listen(self) -> None:
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        url = f"ws://127.0.0.1:{self.port}{BASE}workbench/api/events?protocol=1"
        ws = await websocket_connect(HTTPRequest(url, headers=self.headers()))
        self.listening = True
        while (raw := await ws.read_message()) is not None:
            if json.loads(raw).get("type") == "job":
                self.messages += 1

    def sample(self) -> dict[str, float]:
        """CPU seconds so far, statements so far, messages so far."""
        if self.listen_error is not None:
            raise SystemExit(f"{self.label}: the WebSocket client failed: {self.listen_error!r}")
        cpu = psutil.Process(self.server.pid).cpu_times()
        counts = json.loads(self.counts_file.read_text())
        return {"cpu": cpu.user + cpu.system, "queries": counts["all"],
                "listings": counts["listing"], "kops": counts["kops"],
                "messages": self.messages, "t": time.monotonic()}  # fmt: skip

    def stop(self) -> None:
        """Stop what this started, by PID."""
        for proc in reversed(self.procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def rates(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per-second rates over a window."""
    span = after["t"] - before["t"]
    return {
        "cpu_s_per_s": round((after["cpu"] - before["cpu"]) / span, 5),
        "queries_per_s": round((after["queries"] - before["queries"]) / span, 2),
        "listings_per_s": round((after["listings"] - before["listings"]) / span, 2),
        "sqlite_kilo_instructions_per_s": round((after["kops"] - before["kops"]) / span, 1),
        "job_messages_per_s": round((after["messages"] - before["messages"]) / span, 2),
    }


def pct(values: list[float], q: float) -> float:
    """The q-quantile in milliseconds."""
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def _ratio(new: float, old: float) -> float | None:
    return round(new / old, 4) if old else None


def main() -> None:
    """Run both servers side by side and print a JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--baseline", default="d2ff5be", help="commit to compare against")
    ap.add_argument("--baseline-path", help="an existing checkout to use as the baseline")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wb-bench-watcher-"))
    made_worktree = None
    if args.baseline_path:
        baseline = Path(args.baseline_path)
    else:
        made_worktree = baseline = work / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline),
                        args.baseline], check=True, capture_output=True)  # fmt: skip
    servers = [
        Server("new", ROOT, work / "new", args.jobs),
        Server("baseline", baseline, work / "old", args.jobs),
    ]
    results: dict[str, Any] = {"jobs": args.jobs, "running": 1, "seconds": args.seconds,
                               "baseline_code": args.baseline_path or args.baseline}  # fmt: skip
    try:
        for server in servers:
            server.start()
        time.sleep(3.0)  # both watchers started and settled
        before = [s.sample() for s in servers]
        time.sleep(args.seconds)
        after = [s.sample() for s in servers]
        for server, b, a in zip(servers, before, after, strict=True):
            results[server.label] = rates(b, a)
        session = requests.Session()
        timings: dict[str, list[float]] = {s.label: [] for s in servers}
        for server in servers:  # warm up
            session.get(server.api("jobs"), headers=server.headers(), timeout=60).raise_for_status()
        for _ in range(args.requests):
            for server in servers:
                t0 = time.perf_counter()
                r = session.get(server.api("jobs"), headers=server.headers(), timeout=60)
                timings[server.label].append(time.perf_counter() - t0)
                r.raise_for_status()
                assert r.json()["total"] == args.jobs + 1
        for label, values in timings.items():
            results[label]["get_jobs_ms"] = {"p50": pct(values, 0.5), "p95": pct(values, 0.95)}
        new, old = results["new"], results["baseline"]
        results["ratio_new_to_baseline"] = {
            "cpu": _ratio(new["cpu_s_per_s"], old["cpu_s_per_s"]),
            "queries": _ratio(new["queries_per_s"], old["queries_per_s"]),
            "sqlite_work": _ratio(
                new["sqlite_kilo_instructions_per_s"], old["sqlite_kilo_instructions_per_s"]
            ),
            "get_jobs_p50": _ratio(new["get_jobs_ms"]["p50"], old["get_jobs_ms"]["p50"]),
        }
    finally:
        for server in servers:
            server.stop()
        if made_worktree is not None:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(made_worktree)], check=False)  # fmt: skip
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
