"""The SQLite store: records, ranks, events, filters; shared by separate processes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from workbench.spec import JobEvent, JobRecord, JobStatus, RankState
from workbench.store import JobStore


def record(name: str, t: float) -> JobRecord:
    return JobRecord(
        name=name,
        status=JobStatus.PENDING,
        backend="local",
        spec={"workers": 2, "gpus": 1},
        image="img",
        created_at=t,
        price_per_hour=3.6,
    )


def test_round_trip_and_filters(tmp_path: Path):
    s = JobStore(tmp_path / "jobs.db")
    s.insert(record("a", 1.0))
    s.insert(record("b", 2.0))
    s.update("a", status=JobStatus.RUNNING, started_at=10.0, event=JobEvent(10.0, "Started", "go"))
    s.set_rank("a", 0, state=RankState.RUNNING, details={"pid": 123})
    s.set_rank("a", 0, state=RankState.FAILED, exit_code=3)
    a = s.get("a")
    assert a is not None and a.status is JobStatus.RUNNING
    assert (
        a.ranks[0].state is RankState.FAILED and a.ranks[0].exit_code == 3 and a.ranks[0].pid == 123
    )
    assert [e.reason for e in a.events] == ["Started"]
    assert [r.name for r in s.list()] == ["b", "a"]
    assert [r.name for r in s.list(status=["Running"])] == ["a"]
    assert [r.name for r in s.list(limit=1, offset=1)] == ["a"]
    assert s.count() == 2 and s.count(["Pending"]) == 1
    assert a.cost(now=None) >= 0
    assert a.to_dict()["ranks"][0]["state"] == "Failed"
    s.delete("a")
    assert s.get("a") is None and s.rank_rows("a") == []


def test_delete_only_if_compares_details_then_deletes(tmp_path: Path) -> None:
    """A compare-and-delete: a dead launch's row is cleared only while it still holds
    that launch's mark, never the row a newer launch (or the finished one) left."""
    s = JobStore(tmp_path / "jobs.db")
    r = record("a", 1.0)
    r.details = {"launching": "token-1"}
    s.insert(r)
    s.set_rank("a", 0, state=RankState.PENDING)
    s.add_event("a", JobEvent(1.0, "Submitted", "x"))
    assert s.delete("a", only_if={"launching": "token-2"}) is False
    assert s.get("a") is not None and len(s.rank_rows("a")) == 1
    s.update("a", details={"launching": None})
    assert s.delete("a", only_if={"launching": "token-1"}) is False  # the launch finished
    s.update("a", details={"launching": "token-1"})
    assert s.delete("a", only_if={"launching": "token-1"}) is True
    assert s.get("a") is None and s.rank_rows("a") == [] and s.events_since("a") == []
    assert s.delete("a") is False


def test_withdraw_cancel_restores_the_status_only_while_cancelling(tmp_path: Path) -> None:
    """A cancel that never reached the job is withdrawn: back to the status it had, the
    cancel flag cleared, an event added; a job that has moved on is left alone."""
    s = JobStore(tmp_path / "jobs.db")
    s.insert(record("a", 1.0))
    s.update("a", status=JobStatus.RUNNING)
    assert s.request_cancel("a", JobEvent(2.0, "Cancelling", "x"))
    assert s.row("a")["cancel_requested"] == 1
    assert s.withdraw_cancel("a", JobStatus.RUNNING, JobEvent(3.0, "CancelFailed", "y")) is True
    got = s.get("a")
    assert got is not None and got.status is JobStatus.RUNNING
    assert [e.reason for e in got.events][-2:] == ["Cancelling", "CancelFailed"]
    assert s.row("a")["cancel_requested"] == 0
    assert s.withdraw_cancel("a", JobStatus.RUNNING, JobEvent(4.0, "CancelFailed", "z")) is False
    s.request_cancel("a", JobEvent(5.0, "Cancelling", "x"))
    s.update("a", status=JobStatus.CANCELLED)  # the cancel got through after all
    assert s.withdraw_cancel("a", JobStatus.RUNNING, JobEvent(6.0, "CancelFailed", "z")) is False
    assert s.get("a").status is JobStatus.CANCELLED  # type: ignore[union-attr]


def test_cost_is_price_times_seconds_times_workers():
    r = record("c", 0.0)
    r.started_at, r.finished_at = 100.0, 200.0
    assert abs(r.cost() - 3.6 / 3600 * 100 * 2) < 1e-12


def test_another_process_sees_writes(tmp_path: Path):
    s = JobStore(tmp_path / "jobs.db")
    s.insert(record("x", 1.0))
    code = (
        "import sys; from workbench.store import JobStore; from workbench.spec import JobStatus;"
        f"s = JobStore({str(tmp_path / 'jobs.db')!r}); s.update('x', status=JobStatus.SUCCEEDED)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    x = s.get("x")
    assert x is not None and x.status is JobStatus.SUCCEEDED


def test_many_openers_of_a_fresh_store_all_succeed(tmp_path):
    """Switching a new database to WAL takes an exclusive lock, and SQLite says "database is
    locked" at once (no busy wait) to a second opener: a new home opened by a server's
    threads, or two kernels, at the same moment failed about one round in fifteen."""
    import threading

    from workbench.store import JobStore

    for round_ in range(30):
        path = tmp_path / f"r{round_}" / "jobs.db"
        errors: list[BaseException] = []

        def open_and_read(path: Path = path, errors: list[BaseException] = errors) -> None:
            try:
                JobStore(path).exists("x")
            except BaseException as e:  # any failure of any opener fails the round
                errors.append(e)

        threads = [threading.Thread(target=open_and_read) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == [], f"round {round_}: {errors[0]}"


def test_data_version_moves_only_when_another_connection_commits(tmp_path: Path) -> None:
    """A waiting supervisor skips its queue decision while data_version stands still: it
    must move on every commit from elsewhere (another process's store), and not on a read
    or on this connection's own writes (a waiter's own "Queued" event)."""
    mine, theirs = JobStore(tmp_path / "s.db"), JobStore(tmp_path / "s.db")
    mine.insert(record("a", 1.0))
    v0 = mine.data_version()
    mine.update("a", message="waiting")  # its own write
    mine.active_rows("local")  # a read
    assert mine.data_version() == v0
    theirs.update("a", status=JobStatus.RUNNING)
    v1 = mine.data_version()
    assert v1 != v0 and mine.data_version() == v1
    assert [r["status"] for r in mine.active_rows("local")] == ["Running"]
