"""The SQLite (WAL) job store shared by kernels, the Jupyter server, the CLI and supervisors.

The JobManager owns one store for every backend: each job row says its backend, and
lookups route by that column. Shared columns are backend-neutral (status, times, attempt,
message, spec, image, price, events); what only one backend needs (the local supervisor's
PID, a GPU allocation, a pod name) lives in that row's ``details`` JSON, which only the
job's backend reads and writes. The schema is versioned (see _store_schema). WAL lets many
readers follow while one supervisor writes.
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ._store_schema import VERSION, migrate, schema_version
from .errors import BackendUnavailableError
from .spec import ACTIVE_STATUSES, JobEvent, JobRecord, JobStatus, RankRecord, RankState

# Seconds a writer waits for another process's lock before giving up (tests shorten it).
TIMEOUT_ENV = "WORKBENCH_DB_TIMEOUT"
ACTIVE = ACTIVE_STATUSES  # Pending, Running, Cancelling
_IN_ACTIVE = f"({','.join('?' * len(ACTIVE))})"
F = TypeVar("F", bound=Callable[..., Any])
_BEFORE_CANCELLING = (JobStatus.PENDING, JobStatus.RUNNING)

JOB_COLUMNS = (
    "status",
    "runtime",
    "image",
    "started_at",
    "finished_at",
    "attempt",
    "message",
    "cancel_requested",
)


def store_timeout() -> float:
    """How long (seconds) to wait for a lock held by another process (WORKBENCH_DB_TIMEOUT)."""
    try:
        return max(0.0, float(os.environ.get(TIMEOUT_ENV, "") or 30.0))
    except ValueError:
        return 30.0


def translate_error(path: Path, e: sqlite3.Error, timeout: float) -> BackendUnavailableError:
    """One clear line for an SQLite failure (locked, disk full, I/O error), never a traceback."""
    code = getattr(e, "sqlite_errorcode", None)
    text = str(e)
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED) or "locked" in text:
        return BackendUnavailableError(
            "store",
            f"the job store {path} is locked: another process held it for more than {timeout:g} s",
            f"try again; {TIMEOUT_ENV} sets how long to wait",
        )
    if code == sqlite3.SQLITE_FULL or "disk is full" in text:
        return BackendUnavailableError(
            "store",
            f"no space left on {path.parent} (the job store cannot grow)",
            "free some space",
        )
    return BackendUnavailableError("store", f"the job store {path} failed: {text}")


def _translated(method: F) -> F:
    """SQLite errors leave the store as BackendUnavailableError (a taken name stays an
    IntegrityError: the backend turns that into its own message)."""

    @functools.wraps(method)
    def wrapper(self: JobStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as e:
            raise translate_error(self.path, e, self.timeout) from e

    return wrapper  # type: ignore[return-value]


def _private_file(path: Path, create: bool = True) -> None:
    """Make ``path`` 0600 (creating it empty when asked): job specs and events are private.

    Never opens an existing database: closing any descriptor of it would drop the POSIX
    locks this process's SQLite connections hold on it (SQLite's "how to corrupt" list).
    """
    try:
        if create and not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:  # another thread or process made it first
        pass
    try:
        st = path.stat()
        if st.st_mode & 0o077 and st.st_uid == os.getuid():
            path.chmod(0o600)
    except (FileNotFoundError, PermissionError):  # not there yet, or not ours: SQLite decides
        pass


class JobStore:
    """Jobs, ranks and events in one SQLite file; safe across threads and processes."""

    def __init__(self, path: Path | str, timeout: float | None = None) -> None:
        self.path = Path(path)
        self.timeout = store_timeout() if timeout is None else timeout
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._local = threading.local()
        self._setup()

    @_translated
    def _setup(self) -> None:
        db = self._conn()
        found = schema_version(db)
        if found > VERSION:
            raise BackendUnavailableError(
                "store",
                f"the job store {self.path} has schema version {found}, newer than this "
                f"workbench knows ({VERSION})",
                "upgrade jupyter-gpu-workbench",
            )
        migrate(db)

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None or getattr(self._local, "pid", None) != os.getpid():
            _private_file(self.path)
            conn = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout * 1000)}")
            self._use_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            # SQLite gives -wal/-shm the database's mode; ones from an older version may differ.
            for suffix in ("-wal", "-shm"):
                _private_file(self.path.with_name(self.path.name + suffix), create=False)
            self._local.conn = conn
            self._local.pid = os.getpid()
        return conn

    def _use_wal(self, conn: sqlite3.Connection) -> None:
        """Switch a fresh database to WAL (persistent: later opens find it set).

        Switching takes an exclusive lock, and SQLite answers "database is locked" at once,
        without its busy handler, when another connection opens the fresh file at the same
        moment (two kernels, or a server's threads, on a new home): retry until the timeout.
        """
        deadline = time.monotonic() + self.timeout
        pause = 0.005
        while True:
            try:
                if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() >= deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.1)

    @contextlib.contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        db = self._conn()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def close(self) -> None:
        """Close this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    # ---- jobs ---------------------------------------------------------------------------
    @_translated
    def insert(self, record: JobRecord) -> None:
        """Add a new job; raises sqlite3.IntegrityError when the name is taken."""
        with self._tx() as db:
            self._insert(db, record)

    @contextlib.contextmanager
    def adding(self, record: JobRecord) -> Iterator[None]:
        """Insert ``record``, run the block (which makes the job's files), commit only if it
        succeeds: a failure leaves no record. A taken name raises sqlite3.IntegrityError
        before the block runs, so a same-name race's loser never touches the folder."""
        try:
            db = self._conn()
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise translate_error(self.path, e, self.timeout) from e
        try:
            self._insert(db, record)
            yield
            db.execute("COMMIT")
        except sqlite3.IntegrityError:
            _rollback(db)
            raise
        except sqlite3.Error as e:
            _rollback(db)
            raise translate_error(self.path, e, self.timeout) from e
        except BaseException:
            _rollback(db)
            raise

    def _insert(self, db: sqlite3.Connection, record: JobRecord) -> None:
        db.execute(
            "INSERT INTO jobs (name, backend, status, runtime, image, spec_json, created_at,"
            " attempt, message, price_per_hour, details) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (
                record.name,
                record.backend,
                record.status.value,
                record.runtime,
                record.image,
                json.dumps(record.spec),
                record.created_at,
                record.attempt,
                record.message,
                record.price_per_hour,
                json.dumps(record_details(record)),
            ),
        )
        for ev in record.events:
            self._add_event(db, record.name, ev)

    @_translated
    def exists(self, name: str) -> bool:
        """True when a job called ``name`` is stored."""
        row = self._conn().execute("SELECT 1 FROM jobs WHERE name=?", (name,)).fetchone()
        return row is not None

    @_translated
    def backend_of(self, name: str) -> str | None:
        """The backend that runs job ``name`` (None when no such job): the routing key."""
        row = self._conn().execute("SELECT backend FROM jobs WHERE name=?", (name,)).fetchone()
        return None if row is None else str(row[0])

    @_translated
    def active_backends(self) -> builtins.list[str]:
        """Backends with a job still Pending or Running (the ones worth reconciling)."""
        q = f"SELECT DISTINCT backend FROM jobs WHERE status IN {_IN_ACTIVE} ORDER BY backend"
        return [str(r[0]) for r in self._conn().execute(q, ACTIVE)]

    @_translated
    def update(
        self,
        name: str,
        event: JobEvent | None = None,
        details: dict[str, Any] | None = None,
        **columns: Any,
    ) -> None:
        """Set job columns, merge ``details`` into the backend's JSON (a None value drops
        that key) and add an event, in one transaction."""
        bad = set(columns) - set(JOB_COLUMNS)
        if bad:
            raise KeyError(f"unknown job columns {sorted(bad)}")
        with self._tx() as db:
            if columns or details:
                values = [c.value if isinstance(c, JobStatus) else c for c in columns.values()]
                sets = [f"{k}=?" for k in columns]
                if JobStatus(columns.get("status", "Failed")) in _BEFORE_CANCELLING:
                    # A stop under way is never undone by a late "Running" (a supervisor
                    # that started its ranks as the cancel came in).
                    sets[list(columns).index("status")] = (
                        "status=CASE WHEN status='Cancelling' THEN status ELSE ? END"
                    )
                if details:
                    sets.append("details=json_patch(details, ?)")
                    values.append(json.dumps(details))
                db.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE name=?", (*values, name))
            if event is not None:
                self._add_event(db, name, event)

    @_translated
    def finish_if_active(
        self, name: str, status: JobStatus, message: str, event: JobEvent, rank_state: RankState
    ) -> bool:
        """End a job that is still Pending/Running, and every rank record it left unfinished
        (so no duration keeps growing), in one transaction; False when it had already ended."""
        now = time.time()
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET status=?, message=?, finished_at=? WHERE name=? AND status IN "
                + _IN_ACTIVE,
                (status.value, message, now, name, *ACTIVE),
            )
            if cur.rowcount == 0:
                return False
            db.execute(
                "UPDATE ranks SET state=?, finished_at=COALESCE(finished_at, ?)"
                " WHERE job=? AND state IN (?,?)",
                (rank_state.value, now, name, RankState.PENDING.value, RankState.RUNNING.value),
            )
            self._add_event(db, name, event)
        return True

    @_translated
    def request_cancel(self, name: str, event: JobEvent) -> bool:
        """Mark a Pending/Running job Cancelling (cancel_requested set, ``event`` added) in
        one transaction; False when it had already ended or was already Cancelling."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET status=?, cancel_requested=1 WHERE name=? AND status IN (?,?)",
                (
                    JobStatus.CANCELLING.value,
                    name,
                    JobStatus.PENDING.value,
                    JobStatus.RUNNING.value,
                ),
            )
            if cur.rowcount == 0:
                return False
            self._add_event(db, name, event)
        return True

    @_translated
    def withdraw_cancel(self, name: str, status: JobStatus, event: JobEvent) -> bool:
        """Undo request_cancel when the cancel never reached the job (its cluster did not
        answer): back to ``status``, ``event`` added, unless the job has moved on since
        (ended, or another cancel got through); False then."""
        with self._tx() as db:
            cur = db.execute(
                "UPDATE jobs SET status=?, cancel_requested=0 WHERE name=? AND status=?",
                (status.value, name, JobStatus.CANCELLING.value),
            )
            if cur.rowcount == 0:
                return False
            self._add_event(db, name, event)
        return True

    @_translated
    def row(self, name: str) -> dict[str, Any] | None:
        """The raw job row, ``details`` decoded (for the job's backend)."""
        r = self._conn().execute("SELECT * FROM jobs WHERE name=?", (name,)).fetchone()
        return _decoded(r) if r else None

    @_translated
    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version`` on this thread's connection: it changes when
        another connection commits, and only then (a waiter's "has anything changed")."""
        return int(self._conn().execute("PRAGMA data_version").fetchone()[0])

    @_translated
    def active_rows(self, backend: str | None = None) -> list[dict[str, Any]]:
        """Raw rows (``details`` decoded) of jobs not yet finished, of one backend or all."""
        q = f"SELECT * FROM jobs WHERE status IN {_IN_ACTIVE}"
        args: tuple[str, ...] = ACTIVE
        if backend is not None:
            q, args = q + " AND backend=?", (*ACTIVE, backend)
        return [_decoded(r) for r in self._conn().execute(q, args).fetchall()]

    @_translated
    def get(self, name: str) -> JobRecord | None:
        """The job called ``name`` with its ranks and events, or None."""
        records = self._records("WHERE name=?", (name,))
        return records[0] if records else None

    @_translated
    def records(self, names: builtins.list[str]) -> builtins.list[JobRecord]:
        """The stored records of the jobs called ``names`` (those that exist), in any order."""
        found: builtins.list[JobRecord] = []
        for chunk in _chunks(names, 500):
            found += self._records(f"WHERE name IN ({','.join('?' * len(chunk))})", tuple(chunk))
        return found

    @_translated
    def changes_after(
        self, since: int, limit: int
    ) -> tuple[int, int, builtins.list[tuple[int, str, str]]]:
        """The change feed's raw rows after ``since`` (id, job, kind; oldest first, at most
        ``limit``), then the newest id and the pruning floor (ids up to it are gone). Read
        in that order, no transaction needed: a floor above ``since`` read after the rows
        says some may have been pruned before they were read (workbench._store_feed)."""
        db = self._conn()
        rows = db.execute(
            "SELECT id, job, kind FROM changes WHERE id > ? ORDER BY id LIMIT ?", (since, limit)
        ).fetchall()
        newest, oldest = db.execute(
            "SELECT (SELECT seq FROM sqlite_sequence WHERE name='changes'),"
            " (SELECT MIN(id) FROM changes)"
        ).fetchone()
        newest = int(newest or 0)
        floor = newest if oldest is None else int(oldest) - 1
        return newest, floor, [(int(i), str(j), str(k)) for i, j, k in rows]

    @_translated
    def list(
        self,
        status: list[str] | None = None,
        backend: str | None = None,
        limit: int | None = None,
        offset: int = 0,
        with_events: bool = True,
    ) -> list[JobRecord]:
        """Jobs, newest first, optionally filtered by status and backend."""
        clause, args = _filters(status, backend)
        clause += " ORDER BY created_at DESC, name"
        if limit is not None:
            clause += " LIMIT ? OFFSET ?"
            args += (limit, offset)
        return self._records(clause, args, with_events=with_events)

    @_translated
    def count(self, status: builtins.list[str] | None = None, backend: str | None = None) -> int:
        """How many jobs (optionally in these states, of one backend)."""
        where, args = _filters(status, backend)
        return int(self._conn().execute(f"SELECT COUNT(*) FROM jobs {where}", args).fetchone()[0])

    @_translated
    def delete(self, name: str, only_if: dict[str, str] | None = None) -> bool:
        """Forget a job entirely; with ``only_if``, only while each of those ``details``
        keys holds that value (a compare-and-delete). Whether a job was deleted."""
        clause, args = "name=?", [name]
        for key, value in (only_if or {}).items():
            clause += " AND json_extract(details, ?)=?"
            args += [f"$.{key}", value]
        with self._tx() as db:
            deleted = db.execute(f"DELETE FROM jobs WHERE {clause}", args).rowcount > 0
            if deleted or not only_if:  # rank and event rows no job names go too
                for table in ("ranks", "events"):
                    db.execute(f"DELETE FROM {table} WHERE job=?", (name,))
        return deleted

    def _records(
        self, clause: str, args: tuple[Any, ...], with_events: bool = True
    ) -> builtins.list[JobRecord]:
        db = self._conn()
        rows = db.execute(f"SELECT * FROM jobs {clause}", args).fetchall()
        if not rows:
            return []
        names = [r["name"] for r in rows]
        ranks: dict[str, builtins.list[RankRecord]] = {n: [] for n in names}
        events: dict[str, builtins.list[JobEvent]] = {n: [] for n in names}
        for chunk in _chunks(names, 500):
            marks = ",".join("?" * len(chunk))
            for r in db.execute(f"SELECT * FROM ranks WHERE job IN ({marks}) ORDER BY rank", chunk):
                details = json.loads(r["details"])
                ranks[r["job"]].append(
                    RankRecord(
                        rank=r["rank"],
                        state=RankState(r["state"]),
                        details=details,
                        exit_code=r["exit_code"],
                        started_at=r["started_at"],
                        finished_at=r["finished_at"],
                        gpu_devices=r["gpus"],
                        node=details.get("node"),
                    )
                )
            if with_events:
                q = f"SELECT * FROM events WHERE job IN ({marks}) ORDER BY id"
                for e in db.execute(q, chunk):
                    events[e["job"]].append(
                        JobEvent(e["time"], e["reason"], e["message"], e["level"])
                    )
        jobs = []
        for r in rows:
            details = json.loads(r["details"])
            for rank in ranks[r["name"]]:
                # The gang restarts as one: every rank of attempt N was started N-1 times more.
                rank.restarts = max(0, int(r["attempt"]) - 1)
            jobs.append(
                JobRecord(
                    name=r["name"],
                    status=JobStatus(r["status"]),
                    backend=r["backend"],
                    spec=json.loads(r["spec_json"]),
                    image=r["image"],
                    runtime=r["runtime"],
                    created_at=r["created_at"],
                    started_at=r["started_at"],
                    finished_at=r["finished_at"],
                    attempt=r["attempt"],
                    message=r["message"],
                    price_per_hour=r["price_per_hour"],
                    job_dir=details.get("job_dir"),  # a Python attribute; on the wire: details
                    details=details,
                    ranks=ranks[r["name"]],
                    events=events[r["name"]],
                )
            )
        return jobs

    # ---- ranks and events ---------------------------------------------------------------
    @_translated
    def set_rank(
        self, job: str, rank: int, details: dict[str, Any] | None = None, **columns: Any
    ) -> None:
        """Create or update one rank's row; ``details`` merges into the backend's JSON."""
        cols = {k: (v.value if isinstance(v, RankState) else v) for k, v in columns.items()}
        with self._tx() as db:
            exists = db.execute(
                "SELECT 1 FROM ranks WHERE job=? AND rank=?", (job, rank)
            ).fetchone()
            if exists:
                sets = [f"{k}=?" for k in cols]
                values = list(cols.values())
                if details:
                    sets.append("details=json_patch(details, ?)")
                    values.append(json.dumps(details))
                if sets:
                    db.execute(
                        f"UPDATE ranks SET {', '.join(sets)} WHERE job=? AND rank=?",
                        (*values, job, rank),
                    )
            else:
                cols.setdefault("state", RankState.PENDING.value)
                if details:
                    cols["details"] = json.dumps(
                        {k: v for k, v in details.items() if v is not None}
                    )
                keys = ["job", "rank", *cols]
                db.execute(
                    f"INSERT INTO ranks ({','.join(keys)}) VALUES ({','.join('?' * len(keys))})",
                    (job, rank, *cols.values()),
                )

    @_translated
    def rank_rows(self, job: str) -> builtins.list[dict[str, Any]]:
        """Raw rank rows (``details`` decoded: the backend's PIDs and the like) for a job."""
        rows = self._conn().execute("SELECT * FROM ranks WHERE job=? ORDER BY rank", (job,))
        return [_decoded(r) for r in rows]

    @_translated
    def add_event(self, job: str, event: JobEvent) -> None:
        """Record an event for ``job``."""
        with self._tx() as db:
            self._add_event(db, job, event)

    @_translated
    def events_since(self, job: str, after_id: int = 0) -> builtins.list[tuple[int, JobEvent]]:
        """Events newer than ``after_id``, with their ids (for followers)."""
        rows = self._conn().execute(
            "SELECT * FROM events WHERE job=? AND id>? ORDER BY id", (job, after_id)
        )
        return [(r["id"], JobEvent(r["time"], r["reason"], r["message"], r["level"])) for r in rows]

    @staticmethod
    def _add_event(db: sqlite3.Connection, job: str, event: JobEvent) -> None:
        db.execute(
            "INSERT INTO events (job, time, reason, message, level) VALUES (?,?,?,?,?)",
            (job, event.time or time.time(), event.reason, event.message, event.level),
        )


def _rollback(db: sqlite3.Connection) -> None:
    """Undo an open transaction; a failed COMMIT (disk full) may have left one open."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


def record_details(record: JobRecord) -> dict[str, Any]:
    """What a new record stores as its backend's ``details`` (its legacy ``job_dir`` too)."""
    details = dict(record.details)
    if record.job_dir is not None:
        details.setdefault("job_dir", record.job_dir)
    return details


def _decoded(row: sqlite3.Row) -> dict[str, Any]:
    d = dict(row)
    d["details"] = json.loads(d.get("details") or "{}")
    return d


def _filters(status: builtins.list[str] | None, backend: str | None) -> tuple[str, tuple[Any, ...]]:
    where: builtins.list[str] = []
    args: builtins.list[Any] = []
    if status:
        where.append(f"status IN ({','.join('?' * len(status))})")
        args.extend(status)
    if backend:
        where.append("backend=?")
        args.append(backend)
    return ("WHERE " + " AND ".join(where)) if where else "", tuple(args)


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]
