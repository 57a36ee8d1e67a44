"""Cancelling: cancel(wait=0) records the stop under way at once, the supervisor records
Cancelled, and a Cancelling job whose supervisor dies still ends Cancelled. Real processes."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

from tests.conftest import job_processes, wait_for
from workbench.spec import JobEvent, JobRecord, JobStatus, TrainSpec, parse_statuses

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
STUBBORN = (
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN);"
    " print('up', flush=True); time.sleep(600)"
)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def stubborn_job(manager, name: str) -> None:
    """A job whose rank ignores SIGTERM, so it stays Cancelling for the stop grace (3 s)."""
    manager.submit(TrainSpec(command=["python", "-c", STUBBORN], name=name, workers=1,
                             working_dir=str(SCRIPTS)))  # fmt: skip
    wait_for(lambda: list(manager.logs(name)) == ["up"], timeout=90, what="SIGTERM ignored")


def test_cancel_wait_0_records_cancelling_then_the_supervisor_ends_it(manager):
    stubborn_job(manager, "slowstop")
    asked = manager.cancel("slowstop", wait=0)
    assert asked.status is JobStatus.CANCELLING
    assert not asked.status.terminal and asked.status.active
    assert asked.events[-1].reason == "Cancelling" and asked.events[-1].level == "warning"
    # Every reader sees it, and the status filters know it.
    assert [r.name for r in manager.list(status=["Cancelling"])] == ["slowstop"]
    assert manager.counts()["Cancelling"] == 1
    assert manager.get("slowstop").status is JobStatus.CANCELLING
    # A second cancel changes nothing and adds no event.
    again = manager.cancel("slowstop", wait=0)
    assert [e.reason for e in again.events].count("Cancelling") == 1
    done = manager.wait("slowstop", timeout=60)
    assert done.status is JobStatus.CANCELLED
    reasons = [e.reason for e in done.events]
    assert reasons.index("Cancelling") < reasons.index("Cancelled")
    wait_for(lambda: job_processes("slowstop") == [], timeout=30, what="no job processes")


def test_a_cancelling_job_whose_supervisor_is_killed_ends_cancelled(manager):
    stubborn_job(manager, "orphan")
    store = manager.backend().store
    sup = store.row("orphan")["details"]["supervisor_pid"]
    assert manager.cancel("orphan", wait=0).status is JobStatus.CANCELLING
    os.kill(sup, signal.SIGKILL)  # mid-stop: the rank still ignores SIGTERM
    wait_for(lambda: gone(sup), what="supervisor gone")
    # Reconcile (what the server's watcher and every list run) settles it: not stuck.
    assert manager.reconcile() == 1
    record = manager.get("orphan")
    assert record.status is JobStatus.CANCELLED, record.message
    assert record.finished_at is not None
    assert all(r.finished_at is not None for r in record.ranks)
    wait_for(lambda: job_processes("orphan") == [], timeout=30, what="every process killed")


def test_a_late_running_write_does_not_undo_cancelling(manager, wb_home):
    # The supervisor starts the ranks as the cancel comes in: its "Running" lands after.
    store = manager.store
    store.insert(JobRecord(name="race", status=JobStatus.PENDING, backend="local",
                           spec={"command": ["x"]}, image="i"))  # fmt: skip
    assert store.request_cancel("race", JobEvent(time.time(), "Cancelling", "asked"))
    store.update("race", status=JobStatus.RUNNING, started_at=time.time())
    assert store.get("race").status is JobStatus.CANCELLING
    store.update("race", status=JobStatus.CANCELLED)  # the end still lands
    assert store.get("race").status is JobStatus.CANCELLED
    assert not store.request_cancel("race", JobEvent(time.time(), "Cancelling", "again"))
    assert store.get("race").status is JobStatus.CANCELLED


def test_cancelling_is_a_status_every_filter_takes():
    assert parse_statuses(["cancelling"]) == ["Cancelling"]
    assert not JobStatus.CANCELLING.terminal
