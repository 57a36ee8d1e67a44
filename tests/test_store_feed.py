"""The store's change feed (schema step 3): triggers record every write by every process;
JobManager.changes/watch/wait follow it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.conftest import wait_for
from workbench._store_schema import CHANGES_KEPT
from workbench.manager import JobManager
from workbench.spec import JobEvent, JobRecord, JobStatus, TrainSpec
from workbench.store import JobStore


def _record(name: str, status: JobStatus = JobStatus.PENDING) -> JobRecord:
    return JobRecord(
        name=name, status=status, backend="local", spec={"name": name}, image="img",
        runtime="process", created_at=time.time(),
    )  # fmt: skip


def _changes(path: Path) -> list[tuple[int, str, str]]:
    with sqlite3.connect(path) as db:
        return [(int(i), j, k) for i, j, k in db.execute("SELECT id, job, kind FROM changes")]


def test_every_kind_of_write_is_recorded_and_read_back_once_per_job(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    m = JobManager(store=store)
    assert m.last_change_id() == 0 and not m.changes(0)
    store.insert(_record("a"))
    store.insert(_record("b"))
    mark = m.last_change_id()
    store.set_rank("a", 0, state="Running")
    store.add_event("a", JobEvent(time.time(), "Started", "up", "info"))
    store.update("a", status=JobStatus.RUNNING)
    store.update("b", status=JobStatus.SUCCEEDED)
    store.delete("b")
    kinds = [(j, k) for _, j, k in _changes(store.path)]
    assert kinds == [("a", "upsert"), ("b", "upsert"), ("a", "upsert"), ("a", "upsert"),
                     ("a", "upsert"), ("b", "upsert"), ("b", "delete")]  # fmt: skip
    batch = m.changes(mark)
    assert [r.name for r in batch.jobs] == ["a"] and batch.deleted == ["b"]
    assert batch.jobs[0].status is JobStatus.RUNNING  # the current record
    assert [x.state.value for x in batch.jobs[0].ranks] == ["Running"]
    assert batch.last_id == m.last_change_id() == 7 and not batch.reset
    assert batch.ids == {"a": 5, "b": 7}
    assert not m.changes(batch.last_id)  # nothing after the newest
    # A small limit pages: the pages add up to the same jobs, nothing twice.
    first = m.changes(0, limit=3)
    assert first.more and first.last_id == 3 and [r.name for r in first.jobs] == ["a"]
    rest = m.changes(first.last_id, limit=100)
    assert [r.name for r in rest.jobs] == ["a"] and rest.deleted == ["b"]


def test_a_reader_behind_the_pruned_part_is_told_to_relist(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    m = JobManager(store=store)
    store.insert(_record("busy"))
    assert not m.changes(0).reset  # nothing pruned yet: 0 replays from the start
    with sqlite3.connect(store.path) as db:  # many writes, as the triggers record them
        db.executemany(
            "UPDATE jobs SET message=? WHERE name='busy'",
            [(str(i),) for i in range(CHANGES_KEPT + 1500)],
        )
    newest = m.last_change_id()
    assert newest == CHANGES_KEPT + 1501
    kept = _changes(store.path)
    assert CHANGES_KEPT <= len(kept) <= CHANGES_KEPT + 1000  # pruned in the writers' own tx
    old = m.changes(0)
    assert old.reset and old.last_id == newest and not old.jobs
    recent = m.changes(newest - 5)
    assert not recent.reset and [r.name for r in recent.jobs] == ["busy"]
    assert recent.jobs[0].message == str(CHANGES_KEPT + 1499)
    assert m.changes(newest + 50).reset  # an id this store never gave: another store's


def test_triggers_fire_for_writes_from_another_process(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    m = JobManager(store=JobStore(path))
    code = (
        "import sys, time; from workbench.store import JobStore; from workbench.spec import *;"
        "s = JobStore(sys.argv[1]);"
        "s.insert(JobRecord(name='other', status=JobStatus.PENDING, backend='local',"
        " spec={}, image='i', runtime='process', created_at=time.time()));"
        "s.update('other', status=JobStatus.RUNNING)"
    )
    seen: list[tuple[str, str]] = []
    stop = threading.Event()

    def follow() -> None:
        for batch in m.watch(0, stop=stop, timeout=60, interval=0.02):
            seen.extend((r.name, r.status.value) for r in batch.jobs)

    t = threading.Thread(target=follow)
    t.start()
    try:
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
        wait_for(lambda: ("other", "Running") in seen, timeout=20, what="the other process's job")
    finally:
        stop.set()
        t.join(10)
    assert seen[-1] == ("other", "Running") and len(seen) <= 2


def test_watch_costs_one_tiny_query_per_idle_tick(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    m = JobManager(store=store)
    for i in range(50):
        store.insert(_record(f"j{i}", JobStatus.SUCCEEDED))
    statements: list[str] = []
    real_connect = sqlite3.connect

    def traced(*args, **kwargs):  # type: ignore[no-untyped-def]
        conn = real_connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    sqlite3.connect = traced  # type: ignore[assignment]
    try:
        store.close()  # the store reconnects through the traced connect
        batches = list(m.watch(m.last_change_id(), timeout=0.5, interval=0.05))
    finally:
        sqlite3.connect = real_connect  # type: ignore[assignment]
    assert batches == []
    assert not [s for s in statements if "FROM jobs" in s]  # no listing at all
    ticks = [s for s in statements if "data_version" in s]
    assert 5 <= len(ticks) <= 12
    # The feed itself is read twice: last_change_id() and the watch's first look.
    assert len([s for s in statements if "FROM changes WHERE id >" in s]) == 2


def test_wait_follows_the_feed_to_the_end(manager: JobManager) -> None:
    manager.submit(
        TrainSpec.from_dict(
            {"name": "w", "command": [sys.executable, "-c", "import time; time.sleep(1.5)"]}
        )
    )
    calls = 0
    real_get = manager.get

    def counting_get(name: str) -> JobRecord:
        nonlocal calls
        calls += 1
        return real_get(name)

    manager.get = counting_get  # type: ignore[method-assign]
    done = manager.wait("w", timeout=60)
    assert done.status is JobStatus.SUCCEEDED
    assert [e.reason for e in done.events][-1] == "Succeeded"
    # One read to start (and one per LIVENESS seconds of silence at most), not one per 0.1 s.
    assert calls <= 1 + 60 / 2.0 and calls < 10, calls
    assert json.dumps(done.to_dict(), default=str)


def test_the_widget_feed_reads_the_record_only_when_it_changed(tmp_path: Path) -> None:
    from workbench.widgets._feed import JobFeed

    store = JobStore(tmp_path / "jobs.db")
    m = JobManager(store=store)
    store.insert(_record("viewed", JobStatus.SUCCEEDED))
    store.insert(_record("other", JobStatus.SUCCEEDED))
    gets: list[str] = []
    real_get = m.get

    def counting_get(name: str) -> JobRecord:
        gets.append(name)
        return real_get(name)

    m.get = counting_get  # type: ignore[method-assign]
    feed = JobFeed(m, "viewed")
    feed.record = feed._current_record()
    assert feed.record.name == "viewed" and gets == ["viewed"]
    for _ in range(5):  # nothing changed: no read
        feed.record = feed._current_record()
    store.update("other", message="not ours")
    feed.record = feed._current_record()
    assert gets == ["viewed"] and feed.record.message == ""
    store.update("viewed", message="ours")
    feed.record = feed._current_record()
    assert feed.record.message == "ours" and gets == ["viewed"]  # from the feed, no get()
