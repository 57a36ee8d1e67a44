"""What a crash leaves behind: a SIGKILLed supervisor, a locked store, a full disk, and a
rerun whose original is deleted. Real processes, a real SQLite lock, a real full tmpfs."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import job_processes, wait_for
from workbench.errors import BackendUnavailableError, SpecError
from workbench.spec import JobEvent, JobStatus, RankState, TrainSpec

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


def submit(manager, command, **kw):
    kw.setdefault("working_dir", str(SCRIPTS))
    return manager.submit(TrainSpec.from_dict({"command": command, **kw}))


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_killed_supervisor_finishes_every_rank_and_kills_escaped_processes(manager, tmp_path):
    gate = tmp_path / "gate"
    submit(manager, ["python", "escaper.py"], name="crash", workers=2, env={"GATE": str(gate)})
    wait_for(lambda: len(job_processes("crash")) == 4, what="two ranks and two grandchildren")
    escaped = [p for p in job_processes("crash") if os.getsid(p.pid) == p.pid]
    assert len(escaped) == 2  # they left the ranks' sessions, so no killpg reaches them
    store = manager.backend().store
    sup = store.row("crash")["details"]["supervisor_pid"]
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: gone(sup), what="supervisor gone")
    # With the supervisor dead, rank 1's leader exits; nobody records it.
    leader1 = store.rank_rows("crash")[1]["details"]["pid"]
    gate.touch()
    wait_for(lambda: gone(leader1), what="rank 1 exited")

    record = manager.get("crash")
    assert record.status is JobStatus.FAILED
    assert "supervisor process ended unexpectedly" in record.message
    assert "SupervisorLost" in [e.reason for e in record.events]
    # Every rank record is finished, so no duration keeps growing on a Failed job.
    assert [r.state for r in record.ranks] == [RankState.STOPPED, RankState.STOPPED]
    assert all(r.finished_at is not None for r in record.ranks)
    # Every process of the job is gone, the setsid grandchildren included.
    wait_for(lambda: job_processes("crash") == [], timeout=10, what="every process killed")
    assert all(gone(p.pid) for p in escaped)
    # A second reader changes nothing (one SupervisorLost event, the same end time).
    again = manager.get("crash")
    assert again.finished_at == record.finished_at
    assert [e.reason for e in again.events].count("SupervisorLost") == 1


def test_rerun_keeps_running_after_the_original_is_deleted(manager, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import os, sys, time, pathlib\n"
        "attempt = os.environ['WORKBENCH_ATTEMPT']\n"
        "print('version one, attempt', attempt, flush=True)\n"
        "if os.environ['WORKBENCH_JOB_NAME'].endswith('-r1') and attempt == '1':\n"
        "    while not pathlib.Path(os.environ['GATE']).exists():\n"
        "        time.sleep(0.05)\n"
        "    sys.exit(3)\n"
    )
    gate = tmp_path / "gate"
    submit(
        manager,
        ["python", "train.py"],
        name="orig",
        working_dir=str(tmp_path),
        max_retries=1,
        env={"GATE": str(gate)},
    )
    assert manager.wait("orig", timeout=60).status is JobStatus.SUCCEEDED
    script.write_text("print('version two')\n")  # the user edits the script afterwards
    again = manager.rerun("orig")
    # The rerun runs its own copy, not a path inside the original's folder.
    orig_dir = manager.get("orig").job_dir
    assert not any(arg.startswith(orig_dir + os.sep) for arg in again.spec["command"])
    wait_for(lambda: "attempt 1" in " ".join(manager.logs("orig-r1")), what="rerun's first attempt")
    manager.delete("orig")
    gate.touch()  # attempt 1 fails now; attempt 2 runs the command again
    done = manager.wait("orig-r1", timeout=60)
    assert done.status is JobStatus.SUCCEEDED, (done.message, list(manager.logs("orig-r1")))
    assert done.attempt == 2
    assert list(manager.logs("orig-r1"))[-1] == "version one, attempt 2"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workbench.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_submit_on_a_locked_store_leaves_nothing_and_a_retry_works(wb_home):
    from workbench.store import JobStore

    JobStore(wb_home / "jobs.db")  # the schema exists, as after any first use
    holder = sqlite3.connect(wb_home / "jobs.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    job = ["--name", "locked", "--", "python", "-c", "print('ok')"]
    try:
        out = cli("submit", *job, env={"WORKBENCH_DB_TIMEOUT": "0.3"})
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert out.returncode == 1, out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert "job store" in lines[0] and "is locked" in lines[0]
    assert not (wb_home / "jobs" / "locked").exists()  # rolled back
    retry = cli("submit", "--wait", *job)
    assert retry.returncode == 0, retry.stderr
    assert "Succeeded" in retry.stdout


def test_locked_store_reads_and_writes_raise_one_clear_error(wb_home):
    from workbench.store import JobStore

    store = JobStore(wb_home / "jobs.db", timeout=0.2)
    holder = sqlite3.connect(wb_home / "jobs.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(BackendUnavailableError, match="is locked") as info:
            store.add_event("x", JobEvent(1.0, "R", "m"))
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_same_name_race_loser_is_told_the_job_exists(manager, tmp_path):
    # Two submitters that both passed the name check: the second one to insert loses.
    backend = manager.backend()
    real_exists = backend.store.exists
    backend.store.exists = lambda name: False  # both saw the name free
    try:
        first = submit(manager, ["python", "-c", "print(1)"], name="twin")
        with pytest.raises(SpecError) as info:
            submit(manager, ["python", "-c", "print(2)"], name="twin")
    finally:
        backend.store.exists = real_exists
    assert "a job named 'twin' already exists" in str(info.value)
    assert "remove that folder" not in str(info.value)
    assert manager.wait(first.name, timeout=60).status is JobStatus.SUCCEEDED
    assert (Path(first.job_dir) / "spec.yaml").exists()  # the winner's folder untouched


@pytest.fixture
def small_disk_home(wb_home):
    """WORKBENCH_HOME on a real 4 MiB tmpfs, so a job can fill the disk under the store."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    wb_home.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(wb_home)], check=True
    )
    try:
        yield wb_home
    finally:
        subprocess.run(["umount", "-l", str(wb_home)], check=False)


def test_full_disk_is_named_in_status_events_and_submit_wait(small_disk_home):
    filler = "line = 'x' * 65536\nwhile True:\n    print(line, flush=True)\n"
    out = cli("submit", "--wait", "--name", "fill", "--", "python", "-c", filler)
    expected = f"no space left on {small_disk_home}"
    assert out.returncode == 1, out
    assert "Traceback" not in out.stdout + out.stderr, out
    assert out.stdout.strip().splitlines()[-1].strip() == expected, out.stdout
    got = cli("get", "fill", "-o", "json")
    import json

    record = json.loads(got.stdout)
    assert record["status"] == "Failed" and record["message"] == expected
    assert ("DiskFull", expected) in [(e["reason"], e["message"]) for e in record["events"]]
    assert all(r["state"] != "Running" and r["finished_at"] for r in record["ranks"])
    assert job_processes("fill") == []


def test_cli_cancel_no_wait_returns_at_once_and_the_supervisor_finishes(manager):
    grace = {"WORKBENCH_STOP_GRACE": "10"}
    stubborn = (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
        " print('up', flush=True); time.sleep(600)"
    )
    out = cli("submit", "--name", "stub", "--", "python", "-c", stubborn, env=grace)
    assert out.returncode == 0, out.stderr
    wait_for(lambda: list(manager.logs("stub")) == ["up"], what="SIGTERM ignored")
    started = time.monotonic()
    out = cli("cancel", "--no-wait", "stub", env=grace)
    took = time.monotonic() - started
    assert out.returncode == 0 and out.stdout.strip() == "job stub: Cancelling", out
    assert took < 8, f"cancel --no-wait took {took:.1f} s (grace 10 s)"
    done = manager.wait("stub", timeout=60)
    assert done.status is JobStatus.CANCELLED
    assert time.monotonic() - started >= 9  # the rank ignored SIGTERM: SIGKILL after the grace
    assert job_processes("stub") == []


def test_a_job_submitted_from_inside_a_job_does_not_carry_the_outer_markers(
    manager, monkeypatch, tmp_path
):
    # Cleanup of the outer job kills every process whose env names its folder; the inner
    # job's supervisor must not be one of them.
    outer = tmp_path / "outer-job"
    monkeypatch.setenv("WORKBENCH_JOB_DIR", str(outer))
    monkeypatch.setenv("WORKBENCH_JOB_NAME", "outer")
    gate = tmp_path / "gate"
    submit(manager, ["python", "escaper.py"], name="inner", env={"GATE": str(gate)})
    store = manager.backend().store
    wait_for(lambda: store.row("inner")["details"].get("supervisor_pid"), what="supervisor started")
    env = psutil.Process(store.row("inner")["details"].get("supervisor_pid")).environ()
    assert "WORKBENCH_JOB_DIR" not in env and "WORKBENCH_JOB_NAME" not in env
    # Its ranks get their own job's markers, not the outer ones.
    wait_for(lambda: job_processes("inner"), what="inner ranks")
    assert all(p.environ()["WORKBENCH_JOB_DIR"] != str(outer) for p in job_processes("inner"))
    gate.touch()
