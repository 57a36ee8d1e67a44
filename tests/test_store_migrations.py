"""The versioned schema: a jobs.db written by the code before versioning upgrades in place."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from workbench._store_schema import VERSION
from workbench.errors import BackendUnavailableError
from workbench.store import JobStore

FIXTURE = Path(__file__).parent / "fixtures" / "jobs_db_v0.sql"


def _old_db(path: Path) -> dict[str, list[dict]]:
    """Write the committed dump (made by main 273009e's store) to ``path``; its rows."""
    with sqlite3.connect(path) as db:
        db.executescript(FIXTURE.read_text())
        db.row_factory = sqlite3.Row
        assert db.execute("PRAGMA user_version").fetchone()[0] == 0
        return {
            t: [dict(r) for r in db.execute(f"SELECT * FROM {t} ORDER BY rowid")]
            for t in ("jobs", "ranks", "events")
        }


def test_old_database_upgrades_with_nothing_lost(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    old = _old_db(path)
    store = JobStore(path)
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == VERSION
        columns = {r[1] for r in db.execute("PRAGMA table_info(jobs)")}
    # The local concepts left the shared columns.
    assert not columns & {"job_dir", "supervisor_pid", "supervisor_ctime", "gpu_alloc"}
    assert len(old["jobs"]) == 3 and store.count() == 3
    for o in old["jobs"]:
        rec = store.get(o["name"])
        assert rec is not None
        assert (rec.backend, rec.status.value, rec.runtime, rec.image) == (
            o["backend"], o["status"], o["runtime"], o["image"]
        )  # fmt: skip
        assert rec.spec == json.loads(o["spec_json"])
        assert (rec.created_at, rec.started_at, rec.finished_at) == (
            o["created_at"], o["started_at"], o["finished_at"]
        )  # fmt: skip
        assert (rec.attempt, rec.message, rec.price_per_hour) == (
            o["attempt"], o["message"], o["price_per_hour"]
        )  # fmt: skip
        assert rec.job_dir == o["job_dir"]  # the wire field still answers
        row = store.row(o["name"])
        assert row is not None and row["cancel_requested"] == o["cancel_requested"]
        want = {
            "job_dir": o["job_dir"],
            "supervisor_pid": o["supervisor_pid"],
            "supervisor_ctime": o["supervisor_ctime"],
            "gpu_alloc": json.loads(o["gpu_alloc"]) if o["gpu_alloc"] else None,
        }
        assert row["details"] == {k: v for k, v in want.items() if v is not None}
        assert rec.details == row["details"]
        ranks = [r for r in old["ranks"] if r["job"] == o["name"]]
        assert [r.rank for r in rec.ranks] == [r["rank"] for r in ranks]
        for new, r in zip(rec.ranks, ranks, strict=True):
            assert (new.state.value, new.exit_code, new.started_at, new.finished_at) == (
                r["state"], r["exit_code"], r["started_at"], r["finished_at"]
            )  # fmt: skip
            assert new.gpu_devices == r["gpus"] and new.pid == r["pid"]
            assert new.details == {"pid": r["pid"], "ctime": r["ctime"]}
        events = [e for e in old["events"] if e["job"] == o["name"]]
        assert [e.to_dict() for e in rec.events] == [
            {k: e[k] for k in ("time", "reason", "message", "level")} for e in events
        ]
    # Specific values the dump holds, so the comparison above is not vacuous.
    done = store.row("done")
    assert done is not None and done["details"]["gpu_alloc"] == [[0], [1]]
    assert done["details"]["supervisor_pid"] == 4242
    assert store.rank_rows("done")[1]["details"] == {"pid": 5001, "ctime": 1700000002.75}
    assert store.events_since("live", 0)[-1][0] == 4  # event ids survive (followers resume)
    # The change feed (step 3) starts with every job already stored, oldest first.
    with sqlite3.connect(path) as db:
        seeded = [tuple(r) for r in db.execute("SELECT id, job, kind FROM changes ORDER BY id")]
    by_age = sorted(old["jobs"], key=lambda o: (o["created_at"], o["name"]))
    assert seeded == [(i + 1, o["name"], "upsert") for i, o in enumerate(by_age)]
    # The upgraded database takes new writes through the new columns.
    store.update("live", details={"supervisor_pid": 1}, message="m")
    assert store.row("live")["details"]["supervisor_pid"] == 1  # type: ignore[index]
    assert store.row("live")["details"]["job_dir"] == old["jobs"][1]["job_dir"]  # type: ignore[index]


def test_two_processes_opening_an_old_database_migrate_it_once(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    _old_db(path)
    code = (
        "import sys, sqlite3; from workbench._store_schema import migrate;"
        "db = sqlite3.connect(sys.argv[1], timeout=30, isolation_level=None);"
        "sys.stdin.read(); print(migrate(db))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    # Each waits on stdin until all are up, then all migrate at once.
    outs = [p.communicate("go", timeout=60)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert sum(int(o) for o in outs) == VERSION  # every step ran exactly once in all
    assert JobStore(path).count() == 3


def test_a_newer_database_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    JobStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version={VERSION + 1}")
    with pytest.raises(BackendUnavailableError, match="newer than this workbench") as e:
        JobStore(path)
    assert "upgrade" in str(e.value)


def test_fresh_store_is_current(tmp_path: Path) -> None:
    store = JobStore(tmp_path / "jobs.db")
    with sqlite3.connect(tmp_path / "jobs.db") as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == VERSION
    assert store.count() == 0


def _v2_db(path: Path) -> dict[str, list[dict]]:
    """A jobs.db at schema version 2 (the step before the change feed), with rows written
    the way version-2 code wrote them; its rows."""
    from workbench._store_schema import MIGRATIONS

    db = sqlite3.connect(path, isolation_level=None)
    for step in MIGRATIONS[:2]:
        step(db)
    db.execute("PRAGMA user_version=2")
    db.execute(
        "INSERT INTO jobs (name, backend, status, runtime, image, spec_json, created_at,"
        " started_at, attempt, message, price_per_hour, cancel_requested, details) VALUES"
        " ('old', 'local', 'Succeeded', 'process', 'img', '{\"name\": \"old\"}', 10.0, 11.0,"
        ' 2, \'done\', 1.5, 0, \'{"job_dir": "/x/old", "supervisor_pid": 7}\'),'
        " ('older', 'other', 'Running', 'pod', 'img2', '{}', 5.0, NULL, 1, '', 0, 1, '{}')"
    )
    db.execute(
        "INSERT INTO ranks (job, rank, state, exit_code, gpus, details) VALUES"
        " ('old', 0, 'Succeeded', 0, '0', '{\"pid\": 99}')"
    )
    db.execute(
        "INSERT INTO events (job, time, reason, message, level) VALUES"
        " ('old', 10.0, 'Submitted', 's', 'info'), ('old', 12.0, 'Succeeded', 'ok', 'info')"
    )
    db.row_factory = sqlite3.Row
    rows = {
        t: [dict(r) for r in db.execute(f"SELECT * FROM {t} ORDER BY rowid")]
        for t in ("jobs", "ranks", "events")
    }
    db.close()
    return rows


def test_v2_database_gains_the_change_feed_with_nothing_lost(tmp_path: Path) -> None:
    from workbench.manager import JobManager

    path = tmp_path / "jobs.db"
    old = _v2_db(path)
    store = JobStore(path)
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        assert db.execute("PRAGMA user_version").fetchone()[0] == VERSION == 3
        for table, rows in old.items():  # every row, every column, unchanged
            assert [dict(r) for r in db.execute(f"SELECT * FROM {table} ORDER BY rowid")] == rows
        # Jobs already stored are in the feed (oldest first), so a follower from 0 sees them.
        assert [tuple(r) for r in db.execute("SELECT id, job, kind FROM changes")] == [
            (1, "older", "upsert"),
            (2, "old", "upsert"),
        ]
    m = JobManager(store=store)
    batch = m.changes(0)
    assert [r.name for r in batch.jobs] == ["older", "old"] and batch.last_id == 2
    assert batch.jobs[1].details == {"job_dir": "/x/old", "supervisor_pid": 7}
    assert [e.reason for e in batch.jobs[1].events] == ["Submitted", "Succeeded"]
    # The triggers are in the upgraded file: a writer in another process is recorded.
    code = "import sys, sqlite3; sqlite3.connect(sys.argv[1]).execute(\"UPDATE jobs SET message='m' WHERE name='older'\").connection.commit()"  # noqa: E501
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)
    later = m.changes(batch.last_id)
    assert [(r.name, r.message) for r in later.jobs] == [("older", "m")] and later.last_id == 3
    # Opening it again migrates nothing and adds no second seeding.
    JobStore(path)
    assert m.last_change_id() == 3
