"""One metric channel on the process runtime: run.log records travel in each rank's output
stream, the supervisor's log copier splits them into the job's metrics, surfaces read them
through JobManager.metrics, and no log view ever shows one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.conftest import ROOT, wait_for
from workbench.spec import JobStatus, TrainSpec

# Prints user lines, one of them in two parts with a record glued between (print without
# newline, then run.log + flush): the log must hold the line whole, metrics the record.
REPORTER = """
import os, sys, time
# As in a pod on another node: no job folder to write into, only the output stream.
os.environ.pop("WORKBENCH_JOB_DIR")
from workbench import run
rank = int(os.environ["WORKBENCH_RANK"])
for i in range(1, 6):
    print(f"rank {rank} epoch {i} ...", end="", flush=True)
    run.log(step=i, total=5, loss=1.0 / i, rank=None)
    run.flush()
    print(" done", flush=True)
print(f"rank {rank} to stderr", file=sys.stderr, flush=True)
go = os.environ.get("GO_FILE")
while go and not os.path.exists(go):
    time.sleep(0.05)
for i in range(6, 9):
    run.log(step=i, total=8, loss=1.0 / i, rank=None)
print(f"rank {rank} bye")
"""


def _user_lines(rank: int, steps: range = range(1, 6)) -> list[str]:
    return [
        *(f"rank {rank} epoch {i} ... done" for i in steps),
        f"rank {rank} to stderr",
        f"rank {rank} bye",
    ]


def _submit(manager, tmp_path: Path, name: str, env: dict[str, str] | None = None):
    script = tmp_path / "reporter.py"
    script.write_text(REPORTER)
    spec = {"command": ["python", str(script)], "name": name, "workers": 2,
            "working_dir": str(tmp_path), "env": {"WORKBENCH_RUN_INTERVAL": "0", **(env or {})}}  # fmt: skip
    return manager.submit(TrainSpec.from_dict(spec))


def test_scalars_reach_the_manager_and_logs_hold_only_user_lines(manager, tmp_path):
    _submit(manager, tmp_path, "rep")
    done = manager.wait("rep", timeout=90)
    every = list(manager.logs("rep", rank=None))
    assert done.status is JobStatus.SUCCEEDED, (done.message, every)
    for rank in (0, 1):
        assert list(manager.logs("rep", rank=rank)) == _user_lines(rank)
        assert list(manager.logs("rep", rank=rank, tail=3)) == _user_lines(rank)[-3:]
        assert manager.log_tail("rep", rank, 40) == _user_lines(rank)
        followed = list(manager.logs("rep", rank=rank, follow=True))
        assert followed == _user_lines(rank)
    assert every == [f"[rank {r}] {x}" for r in (0, 1) for x in _user_lines(r)]
    assert list(manager.logs("rep", rank=None, follow=True, tail=2)) == [
        f"[rank {r}] {x}" for r in (0, 1) for x in _user_lines(r)[-2:]
    ]
    # The files hold no record bytes either (the copier split them off on the way).
    for rank in (0, 1):
        raw = (Path(done.job_dir) / "logs" / f"rank-{rank}.log").read_bytes()
        assert b"\x1f" not in raw and b"wb-metric" not in raw
    got = manager.metrics("rep")
    by_rank = {r: [x for x in got["scalars"] if x["rank"] == r] for r in (0, 1)}
    for rank in (0, 1):
        assert [x["step"] for x in by_rank[rank]] == list(range(1, 9))
        assert by_rank[rank][0]["loss"] == 1.0 and by_rank[rank][-1]["total"] == 8
        assert "kind" not in by_rank[rank][0]
    assert got["gpu"] == []
    # the cursor: nothing new after a full read; "" reads from the start again
    assert manager.metrics("rep", since=got["cursor"])["scalars"] == []
    assert len(manager.metrics("rep", since="")["scalars"]) == 16
    newest = manager.metrics("rep", limit=2)["scalars"]
    assert newest == sorted(got["scalars"], key=lambda x: x["time"])[-2:]


def test_metrics_arrive_while_the_job_runs_and_a_cursor_reads_only_new_ones(manager, tmp_path):
    go = tmp_path / "go"
    _submit(manager, tmp_path, "live", env={"GO_FILE": str(go)})
    first: dict = {}

    def five_each():
        first.update(manager.metrics("live", since=""))
        return len(first["scalars"]) == 10

    wait_for(five_each, 60, "the first records while the job runs")
    assert manager.get("live").status is JobStatus.RUNNING
    assert manager.metrics("live", since=first["cursor"])["scalars"] == []
    go.write_text("")
    done = manager.wait("live", timeout=60)
    assert done.status is JobStatus.SUCCEEDED
    rest = manager.metrics("live", since=first["cursor"])["scalars"]
    assert sorted((x["rank"], x["step"]) for x in rest) == [
        (r, s) for r in (0, 1) for s in (6, 7, 8)
    ]


def test_no_surface_reads_metric_files_by_path():
    # Surfaces (widgets, server, CLI, magics, API) read metrics only through the manager.
    out = subprocess.run(
        ["grep", "-rnE", r"metrics_dir\(|read_job_metrics|GPU_FILE|scalars-rank|/metrics/",
         "workbench", "--include=*.py"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    offenders = [
        line
        for line in out.stdout.splitlines()
        if not line.startswith(("workbench/backends/", "workbench/monitor/", "workbench/run.py"))
    ]
    assert offenders == []


def test_chatty_ranks_of_a_killed_supervisor_end_instead_of_blocking(manager, tmp_path):
    # SIGKILL the supervisor while both ranks print as fast as they can (and report): the
    # copier dies with it, its read ends close, and the ranks' next writes fail (EPIPE)
    # instead of blocking on a full pipe; no reconcile (no manager call) is needed for that.
    import os
    import signal

    import psutil

    chatty = (
        "from workbench import run\ni = 0\nwhile True:\n"
        "    i += 1\n    print('x' * 200, i)\n    run.log(step=i, loss=1.0)\n"
    )
    (tmp_path / "chatty.py").write_text(chatty)
    spec = {"command": ["python", str(tmp_path / "chatty.py")], "name": "chat", "workers": 2,
            "working_dir": str(tmp_path)}  # fmt: skip
    manager.submit(TrainSpec.from_dict(spec))
    store = manager.backend().store

    def running():
        rows = store.rank_rows("chat")
        return len(rows) == 2 and all((r.get("details") or {}).get("pid") for r in rows)

    wait_for(running, 60, "both ranks running")
    log0 = Path(store.row("chat")["details"]["job_dir"]) / "logs" / "rank-0.log"
    wait_for(lambda: log0.exists() and log0.stat().st_size > 1 << 20, 60, "a chatty log")
    ranks = [psutil.Process(r["details"]["pid"]) for r in store.rank_rows("chat")]
    os.kill(store.row("chat")["details"]["supervisor_pid"], signal.SIGKILL)
    _, alive = psutil.wait_procs(ranks, timeout=30)
    assert alive == [], "a rank blocked on its output pipe after the supervisor died"
    assert manager.get("chat").status is JobStatus.FAILED  # SupervisorLost, as before


def test_a_rank_whose_log_copier_is_gone_does_not_hang(tmp_path):
    # The copier's read end closes with the supervisor (close-on-exec, no rank holds it):
    # a chatty rank's next write fails at once instead of blocking on a full pipe.
    from workbench.backends._logcopy import LogCopier

    log = open(tmp_path / "rank-0.log", "ab")
    copier = LogCopier(tmp_path)
    w = copier.pipe(0, log.fileno())
    code = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536 + '\\n')\n"
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=w,
                         stderr=subprocess.DEVNULL)  # fmt: skip
    import os

    os.close(w)
    wait_for(lambda: (tmp_path / "rank-0.log").stat().st_size > 1 << 20, 30, "output copied")
    copier._wake(b"c")  # as when the supervisor dies: every read end closes
    assert p.wait(timeout=30) != 0  # EPIPE ended it; it did not block
    log.close()
