"""The job store's versioned schema: forward migrations, one transaction each.

``PRAGMA user_version`` says how many of MIGRATIONS a database has had. A jobs.db written
before the schema had a version (user_version 0, the tables of step 1) upgrades in place.
Append new steps; never edit one that has shipped.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

# Step 1: the schema as it was before versioning (IF NOT EXISTS: an unversioned database
# already has it, a fresh one gets it).
_V1 = [
    """CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    backend TEXT NOT NULL,
    status TEXT NOT NULL,
    runtime TEXT NOT NULL,
    image TEXT NOT NULL,
    spec_json TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    attempt INTEGER NOT NULL DEFAULT 1,
    message TEXT NOT NULL DEFAULT '',
    price_per_hour REAL NOT NULL DEFAULT 0,
    job_dir TEXT,
    supervisor_pid INTEGER,
    supervisor_ctime REAL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    gpu_alloc TEXT
)""",
    "CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status)",
    "CREATE INDEX IF NOT EXISTS jobs_created ON jobs(created_at)",
    """CREATE TABLE IF NOT EXISTS ranks (
    job TEXT NOT NULL,
    rank INTEGER NOT NULL,
    state TEXT NOT NULL,
    pid INTEGER,
    ctime REAL,
    exit_code INTEGER,
    started_at REAL,
    finished_at REAL,
    gpus TEXT,
    PRIMARY KEY (job, rank)
)""",
    """CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    time REAL NOT NULL,
    reason TEXT NOT NULL,
    message TEXT NOT NULL,
    level TEXT NOT NULL
)""",
    "CREATE INDEX IF NOT EXISTS events_job ON events(job, id)",
]

# Step 2: backend-only state (the local supervisor's PID and create time, its GPU
# allocation, the job folder, rank PIDs) moves out of shared columns into one JSON
# ``details`` column per row that only the job's backend reads and writes. json_patch onto
# '{}' drops the keys whose value was NULL.
_V2 = [
    "ALTER TABLE jobs ADD COLUMN details TEXT NOT NULL DEFAULT '{}'",
    """UPDATE jobs SET details = json_patch('{}', json_object(
        'job_dir', job_dir,
        'supervisor_pid', supervisor_pid,
        'supervisor_ctime', supervisor_ctime,
        'gpu_alloc', json(gpu_alloc)))""",
    "ALTER TABLE jobs DROP COLUMN job_dir",
    "ALTER TABLE jobs DROP COLUMN supervisor_pid",
    "ALTER TABLE jobs DROP COLUMN supervisor_ctime",
    "ALTER TABLE jobs DROP COLUMN gpu_alloc",
    "ALTER TABLE ranks ADD COLUMN details TEXT NOT NULL DEFAULT '{}'",
    "UPDATE ranks SET details = json_patch('{}', json_object('pid', pid, 'ctime', ctime))",
    "ALTER TABLE ranks DROP COLUMN pid",
    "ALTER TABLE ranks DROP COLUMN ctime",
    # Lookups route by backend; the change watcher asks for one backend's active jobs.
    "CREATE INDEX IF NOT EXISTS jobs_backend ON jobs(backend, status)",
]


# Step 3: the change feed. Every write to a job, its ranks or its events, by any process
# (kernel, server, CLI, supervisor, a backend's watch thread), adds a row here inside the
# writer's own transaction, so followers read "what changed after id N" instead of listing
# every job. Jobs already stored get one "upsert" each, so a reader starting at 0 sees
# them. Only the newest ~10,000 rows are kept: every 1,000th insert prunes what is older,
# in the same transaction (a reader behind the pruned part is told to re-list).
_NOW = "((julianday('now') - 2440587.5) * 86400.0)"  # unix time; unixepoch() needs 3.42
CHANGES_KEPT = 10_000
_PRUNE_EVERY = 1_000


def _change_trigger(table: str, event: str, job: str, kind: str) -> str:
    return (
        f"CREATE TRIGGER IF NOT EXISTS changes_{table}_{event.lower()} AFTER {event} ON {table}"
        f" BEGIN INSERT INTO changes (job, kind, at) VALUES ({job}, '{kind}', {_NOW}); END"
    )


_V3 = [
    """CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    kind TEXT NOT NULL,
    at REAL NOT NULL
)""",
    f"INSERT INTO changes (job, kind, at) SELECT name, 'upsert', {_NOW} FROM jobs"
    " ORDER BY created_at, name",
    _change_trigger("jobs", "INSERT", "NEW.name", "upsert"),
    _change_trigger("jobs", "UPDATE", "NEW.name", "upsert"),
    _change_trigger("jobs", "DELETE", "OLD.name", "delete"),
    _change_trigger("ranks", "INSERT", "NEW.job", "upsert"),
    _change_trigger("ranks", "UPDATE", "NEW.job", "upsert"),
    _change_trigger("events", "INSERT", "NEW.job", "upsert"),
    _change_trigger("events", "UPDATE", "NEW.job", "upsert"),
    f"""CREATE TRIGGER IF NOT EXISTS changes_prune AFTER INSERT ON changes
    WHEN NEW.id % {_PRUNE_EVERY} = 0
    BEGIN DELETE FROM changes WHERE id <= NEW.id - {CHANGES_KEPT}; END""",
]


def _statements(sql: list[str]) -> Callable[[sqlite3.Connection], None]:
    def step(db: sqlite3.Connection) -> None:
        # One execute per statement: executescript() would COMMIT the open transaction.
        for statement in sql:
            db.execute(statement)

    return step


MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _statements(_V1),
    _statements(_V2),
    _statements(_V3),
]
VERSION = len(MIGRATIONS)


def schema_version(db: sqlite3.Connection) -> int:
    """The number of migrations ``db`` has had."""
    return int(db.execute("PRAGMA user_version").fetchone()[0])


def migrate(db: sqlite3.Connection) -> int:
    """Apply every missing migration, each in its own IMMEDIATE transaction; returns how
    many ran. The version is read again under the write lock, so two processes opening an
    old database at once migrate it once: the second finds the work done."""
    ran = 0
    while schema_version(db) < VERSION:
        db.execute("BEGIN IMMEDIATE")
        try:
            version = schema_version(db)
            if version < VERSION:
                MIGRATIONS[version](db)
                db.execute(f"PRAGMA user_version={version + 1}")
                ran += 1
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
    return ran
