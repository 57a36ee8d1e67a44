"""Logs at scale: tail and follow on 2 M lines and on 50 MB of '\\r' progress, in one run,
against the coreutils a user would run instead.

    .venv/bin/python bench/bench_logs.py [--lines 2000000] [--progress-mb 50] [--repeat 3]
                                         [--before /path/to/older/checkout]

A private WORKBENCH_HOME holds two finished job records (inserted through JobStore) whose
rank-0 logs are written straight to disk: 2 M short lines, and 50 MB of tqdm-style
'\\r' updates with no newline.

1) tail: `workbench logs JOB --tail N` (the real CLI, stdout to /dev/null; its wall time
   includes interpreter start) against `tail -n N FILE`, median of --repeat, for N = 10,
   1000, 1000000 and the whole file (against `cat`); and JobManager.logs in-process (CPU
   seconds, no interpreter start). With --before, the same CLI from another checkout once.
2) the '\\r' log: --tail 5, wall and bytes printed, against `tail -n 5`.
3) follow: a writer appends 2000 time-stamped lines 5 ms apart; per-line delay seen by
   JobManager-style follow (read_logs) and by `tail -f`, p50/p99.
4) server: a real `jupyter server`; a client follows the 2 M-line log and stops reading
   after 256 KiB for 5 s: the server's RSS growth meanwhile; then it reads the rest
   (throughput, line count), against `cat FILE` over a pipe.
5) --chatty (alone): real local jobs through the supervisor, whose ranks' output goes
   through the log copier (a pipe it reads), against --before (ranks wrote their log file
   directly): a rank printing --chatty-lines lines (PYTHONUNBUFFERED, a write per print),
   one writing 1 MiB blocks, and one that also calls run.log every line; the rank's own
   time to print and the job's wall time (started -> finished), median of --repeat.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_server import BASE, BIN, _free_port, start_server

from workbench.spec import JobRecord, JobStatus, RankState
from workbench.store import JobStore


def add_job(home: Path, name: str) -> Path:
    """A finished one-worker job record; returns its rank-0 log path (folder created)."""
    store = JobStore(home / "jobs.db")
    now = time.time()
    job_dir = home / "jobs" / name
    (job_dir / "logs").mkdir(parents=True)
    record = JobRecord(
        name=name, status=JobStatus.SUCCEEDED, backend="local",
        spec={"command": ["python", "train.py"], "workers": 1, "image": "pytorch"},
        image="pytorch", created_at=now - 60, started_at=now - 59, finished_at=now - 1,
        job_dir=str(job_dir),
    )  # fmt: skip
    store.insert(record)
    store.set_rank(name, 0, state=RankState.SUCCEEDED, exit_code=0)
    return job_dir / "logs" / "rank-0.log"


def write_lines(path: Path, n: int) -> None:
    """``n`` training-log lines (~36 bytes each)."""
    with open(path, "wb") as f:
        for start in range(0, n, 100_000):
            stop = min(n, start + 100_000)
            f.write(
                b"".join(b"step %07d loss 0.2500 lr 0.0010 ok\n" % i for i in range(start, stop))
            )


def write_progress(path: Path, mb: int) -> None:
    """``mb`` MB of '\\r'-separated progress updates and no newline at all."""
    block = b"".join(b"\r%8d/99999999 it [00:01, 999.9it/s]" % i for i in range(25_000))
    with open(path, "wb") as f:
        for _ in range(max(1, mb * 1024 * 1024 // len(block))):
            f.write(block)
        f.write(b"\r99999999/99999999 it [00:01, 999.9it/s] done")


def wall(
    cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None
) -> tuple[float, float, int]:
    """Wall and CPU (user + sys) seconds of ``cmd``, and the bytes it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, cwd=cwd)
    assert proc.stdout is not None
    size = 0
    while chunk := proc.stdout.read(1 << 20):
        size += len(chunk)
    assert proc.wait() == 0, cmd
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return seconds, cpu, size


def median_wall(
    cmd: list[str], repeat: int, env: dict[str, str] | None = None
) -> tuple[float, float, int]:
    """Median wall and CPU seconds over ``repeat`` runs, and the bytes printed."""
    runs = [wall(cmd, env) for _ in range(repeat)]
    return (
        statistics.median(r[0] for r in runs),
        statistics.median(r[1] for r in runs),
        runs[0][2],
    )


def before_cli(args: argparse.Namespace, env: dict[str, str], *cli: str) -> dict[str, object]:
    """The older checkout's CLI, once: wall and CPU seconds, bytes printed."""
    cmd = [sys.executable, "-m", "workbench.cli", "logs", *cli]
    # cwd too: ``python -m`` puts the current folder ahead of PYTHONPATH
    seconds, cpu, size = wall(cmd, dict(env, PYTHONPATH=args.before), cwd=args.before)
    return {
        "before_cli_s": round(seconds, 2),
        "before_cli_cpu_s": round(cpu, 2),
        "before_bytes": size,
    }


def bench_tail(log: Path, args: argparse.Namespace, env: dict[str, str]) -> list[dict[str, object]]:
    """The CLI's --tail N against tail -n N (and the whole file against cat)."""
    from workbench.manager import JobManager

    manager = JobManager()
    rows = []
    for n in (10, 1000, 1_000_000, None):
        tail_flag = [] if n is None else ["--tail", str(n)]
        cli = [str(BIN / "workbench"), "logs", "bench-lines", *tail_flag]
        ours, ours_cpu, size = median_wall(cli, args.repeat, env)
        tool = ["cat", str(log)] if n is None else ["tail", "-n", str(n), str(log)]
        theirs, theirs_cpu, their_size = median_wall(tool, args.repeat)
        t0 = time.process_time()
        deque(manager.logs("bench-lines", tail=n), maxlen=0)
        cpu = time.process_time() - t0
        row: dict[str, object] = {
            "tail": n if n is not None else "whole file",
            "cli_s": round(ours, 3), "cli_cpu_s": round(ours_cpu, 3),
            "coreutils_s": round(theirs, 4), "coreutils_cpu_s": round(theirs_cpu, 4),
            "ratio_wall": round(ours / theirs, 1), "in_process_cpu_s": round(cpu, 4),
            "bytes": size, "coreutils_bytes": their_size,
        }  # fmt: skip
        if args.before and n in args.before_tails:
            row.update(before_cli(args, env, "bench-lines", *tail_flag))
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    return rows


def bench_progress(log: Path, args: argparse.Namespace, env: dict[str, str]) -> dict[str, object]:
    """--tail 5 of a '\\r' log against tail -n 5."""
    cli = [str(BIN / "workbench"), "logs", "bench-progress", "--tail", "5"]
    ours, ours_cpu, size = median_wall(cli, args.repeat, env)
    theirs, theirs_cpu, their_size = median_wall(["tail", "-n", "5", str(log)], args.repeat)
    row: dict[str, object] = {
        "file_mb": round(log.stat().st_size / 2**20, 1), "cli_s": round(ours, 3),
        "cli_cpu_s": round(ours_cpu, 3), "cli_bytes": size, "coreutils_s": round(theirs, 4),
        "coreutils_cpu_s": round(theirs_cpu, 4), "coreutils_bytes": their_size,
        "ratio_wall": round(ours / theirs, 1),
    }  # fmt: skip
    if args.before:
        row.update(before_cli(args, env, "bench-progress", "--tail", "5"))
    return row


def bench_follow(work: Path) -> dict[str, object]:
    """Per-line delay of a live log as our follow and as `tail -f` see it."""
    from workbench.backends._logread import read_logs

    path = work / "live.log"
    path.write_bytes(b"")
    n = 2000
    done = threading.Event()
    ours: list[float] = []
    theirs: list[float] = []

    def follow_ours() -> None:
        for line in read_logs([(0, path)], True, None, done.is_set):
            ours.append(time.time() - float(line.split()[1]))

    tail = subprocess.Popen(["tail", "-n", "+1", "-f", str(path)], stdout=subprocess.PIPE)

    def follow_tail() -> None:
        assert tail.stdout is not None
        for raw in tail.stdout:
            theirs.append(time.time() - float(raw.split()[1]))
            if len(theirs) == n:
                return

    threads = [threading.Thread(target=follow_ours), threading.Thread(target=follow_tail)]
    for t in threads:
        t.start()
    with open(path, "ab", buffering=0) as f:
        for i in range(n):
            f.write(b"line %.6f %d\n" % (time.time(), i))
            time.sleep(0.005)
    done.set()
    for t in threads:
        t.join(60)
    tail.terminate()

    def ms(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {
        "lines": n, "ours_seen": len(ours), "tail_f_seen": len(theirs),
        "ours_delay_ms": {"p50": ms(ours, 0.5), "p99": ms(ours, 0.99)},
        "tail_f_delay_ms": {"p50": ms(theirs, 0.5), "p99": ms(theirs, 0.99)},
    }  # fmt: skip


def bench_server(home: Path, work: Path, log: Path) -> dict[str, object]:
    """Server RSS while a follower of the big log stalls; then its full-speed throughput."""
    token = secrets.token_hex(16)
    port = _free_port()
    proc = start_server(home, work, port, token)
    try:
        server = psutil.Process(proc.pid)
        auth = {"Authorization": f"token {token}"}
        warm = f"http://127.0.0.1:{port}{BASE}workbench/api/jobs/bench-lines/logs?tail=1"
        requests.get(warm, headers=auth, timeout=60).raise_for_status()  # imports, threads
        time.sleep(1.0)
        base = server.memory_info().rss
        url = f"http://127.0.0.1:{port}{BASE}workbench/api/jobs/bench-lines/logs?follow=true"
        stream = requests.get(url, headers=auth, stream=True, timeout=600)
        chunks = stream.iter_content(64 * 1024)
        got = [next(chunks) for _ in range(4)]  # a first few chunks, then the client stalls
        peak = base
        for _ in range(50):  # stalled for 5 s
            time.sleep(0.1)
            peak = max(peak, server.memory_info().rss)
        t0 = time.perf_counter()
        total = sum(map(len, got))
        newlines = sum(c.count(b"\n") for c in got)
        for chunk in chunks:
            total += len(chunk)
            newlines += chunk.count(b"\n")
        seconds = time.perf_counter() - t0
        stream.close()
        cat_s = wall(["cat", str(log)])[0]
        return {
            "log_mb": round(log.stat().st_size / 2**20, 1),
            "server_rss_before_mb": round(base / 2**20, 1),
            "server_rss_growth_while_stalled_mb": round((peak - base) / 2**20, 1),
            "rest_read_s": round(seconds, 2), "mb_per_s": round(total / 2**20 / seconds, 1),
            "newlines_received": newlines, "cat_s": round(cat_s, 3),
            "ratio_to_cat": round(seconds / cat_s, 1),
        }  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)


CHATTY = r"""
import os, sys, time
mode, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
t0 = time.perf_counter()
if mode == "blocks":
    block = (b"x" * 1023 + b"\n") * 1024
    for _ in range(n):
        sys.stdout.buffer.write(block)
elif mode == "runlog":
    from workbench import run
    for i in range(n):
        print(f"step {i} of the chatty job: loss 0.123456 lr 0.001 some more text")
        run.log(step=i, total=n, loss=0.123456, rank=None)
    run.flush()
else:
    for i in range(n):
        print(f"step {i} of the chatty job: loss 0.123456 lr 0.001 some more text")
sys.stdout.flush()
open(out, "w").write(repr(time.perf_counter() - t0))
"""

RUN_JOB = r"""
import json, sys, time
from workbench.manager import JobManager
from workbench.spec import TrainSpec
name, script, mode, n, out = sys.argv[1:6]
m = JobManager()
m.submit(TrainSpec.from_dict({"name": name, "command": ["python", script, mode, n, out],
                              "env": {"WORKBENCH_RUN_INTERVAL": "0"}}))
r = m.wait(name, timeout=600)
assert r.status.value == "Succeeded", (r.status, r.message)
print(json.dumps({"job_s": r.finished_at - r.started_at,
                  "scalars": len(m.metrics(name)["scalars"]) if mode == "runlog" else 0}))
"""


def bench_chatty(work: Path, args: argparse.Namespace) -> dict[str, object]:
    """Chatty jobs through the copier (this checkout) and without it (--before)."""
    script = work / "chatty.py"
    script.write_text(CHATTY)
    cases = {"lines": args.chatty_lines, "blocks": args.chatty_blocks, "runlog": args.chatty_lines}
    checkouts = {"after": str(Path(__file__).resolve().parent.parent)}
    if args.before:
        checkouts["before"] = args.before
    results: dict[str, object] = {}
    for mode, n in cases.items():
        row: dict[str, object] = {"n": n}
        for label, root in checkouts.items():
            prints, jobs = [], []
            for i in range(args.repeat):
                home = work / f"chatty-{label}-{mode}-{i}"
                env = {**os.environ, "PYTHONPATH": root, "WORKBENCH_HOME": str(home)}
                out = work / f"{label}-{mode}-{i}.txt"
                got = subprocess.run(
                    [sys.executable, "-c", RUN_JOB, f"c{i}", str(script), mode, str(n), str(out)],
                    env=env, capture_output=True, text=True, timeout=900, check=True,
                )  # fmt: skip
                result = json.loads(got.stdout.strip().splitlines()[-1])
                prints.append(float(out.read_text()))
                jobs.append(result["job_s"])
                if mode == "runlog":
                    row[f"{label}_scalars"] = result["scalars"]
                log = home / "jobs" / f"c{i}" / "logs" / "rank-0.log"
                row[f"{label}_log_mb"] = round(log.stat().st_size / 2**20, 1)
            row[f"{label}_print_s"] = round(statistics.median(prints), 3)
            row[f"{label}_job_s"] = round(statistics.median(jobs), 3)
        results[mode] = row
    return results


def main() -> None:
    """Run every measurement and print a JSON summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=2_000_000)
    ap.add_argument("--progress-mb", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", help="another checkout's root, whose CLI is timed once")
    ap.add_argument(
        "--before-tails", type=int, nargs="*", default=[10, 1000, 1_000_000],
        help="which --tail N to time with --before (1000000 took 107 s before the fix)",
    )  # fmt: skip
    ap.add_argument("--chatty", action="store_true", help="only 5): chatty jobs via the copier")
    ap.add_argument("--chatty-lines", type=int, default=1_000_000)
    ap.add_argument("--chatty-blocks", type=int, default=1024, help="MiB written in 1 MiB blocks")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="wb-bench-logs-"))
    home = work / "home"
    home.mkdir()
    os.environ.update(WORKBENCH_HOME=str(home), WORKBENCH_CONFIG=str(work / "none.yaml"))
    if args.chatty:
        print(json.dumps({"chatty": bench_chatty(work, args)}, indent=2))
        return
    env = dict(os.environ)
    lines_log, progress_log = add_job(home, "bench-lines"), add_job(home, "bench-progress")
    write_lines(lines_log, args.lines)
    write_progress(progress_log, args.progress_mb)
    results: dict[str, object] = {
        "lines": args.lines, "lines_log_mb": round(lines_log.stat().st_size / 2**20, 1),
        "tail": bench_tail(lines_log, args, env),
        "progress_tail_5": bench_progress(progress_log, args, env),
        "follow": bench_follow(work),
        "server_follower": bench_server(home, work, lines_log),
    }  # fmt: skip
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
