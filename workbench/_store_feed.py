"""The store's change feed: what changed after id N, read from the ``changes`` table that
SQLite triggers fill on every write by every process (schema step 3, _store_schema).

Followers (the server's event stream, ``JobManager.wait``, widgets) keep the last id they
saw and ask for what came after it; between looks they only check ``PRAGMA data_version``
on their own connection, one tiny query that changes when any other connection commits.
The cost follows the changes, not the number of jobs.
"""

from __future__ import annotations

import sqlite3
import threading
from dataclasses import dataclass, field

from .spec import JobRecord
from .store import JobStore


@dataclass
class ChangeBatch:
    """Jobs that changed after a given id, each once with its current record."""

    last_id: int  # the newest change id this batch covers: the next ``since``
    jobs: list[JobRecord] = field(default_factory=list)  # ordered by ``ids``
    deleted: list[str] = field(default_factory=list)
    reset: bool = False  # ``since`` is older than what is kept (or unknown): re-list
    ids: dict[str, int] = field(default_factory=dict)  # job name -> its newest change id
    more: bool = False  # the batch hit its limit: ask again from ``last_id``

    def __bool__(self) -> bool:
        return bool(self.jobs or self.deleted or self.reset)


def read_changes(store: JobStore, since: int, limit: int = 1000) -> ChangeBatch:
    """Every job changed after ``since`` (at most ``limit`` change rows read), each once
    with its current record; ``reset`` when ``since`` is older than what is kept or newer
    than anything recorded (another store's id)."""
    newest, floor, rows = store.changes_after(max(since, 0), limit)
    if since < floor or since > newest or since < 0:
        return ChangeBatch(last_id=newest, reset=True)
    if not rows:
        return ChangeBatch(last_id=since)
    latest: dict[str, tuple[int, str]] = {}
    for change_id, job, kind in rows:
        latest[job] = (change_id, kind)
    upserts = [name for name, (_, kind) in latest.items() if kind == "upsert"]
    records = {r.name: r for r in store.records(upserts)} if upserts else {}
    batch = ChangeBatch(last_id=rows[-1][0], more=len(rows) >= limit)
    for name, (change_id, kind) in sorted(latest.items(), key=lambda item: item[1][0]):
        if kind == "delete":
            batch.deleted.append(name)
        elif name in records:
            batch.jobs.append(records[name])
        else:
            continue  # deleted after this batch's last id: the next batch says so
        batch.ids[name] = change_id
    return batch


class DataVersion:
    """Whether any other connection committed to the store since the last look: one
    ``PRAGMA data_version`` on a private read-only connection (a connection does not see
    its own commits there, so this one never writes)."""

    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._conn: sqlite3.Connection | None = None
        self._last: int | None = None
        self._lock = threading.Lock()

    def changed(self) -> bool:
        """True on the first call and whenever a commit happened since the previous one."""
        with self._lock:
            try:
                if self._conn is None:
                    self._conn = sqlite3.connect(
                        f"file:{self.store.path}?mode=ro",
                        uri=True,
                        timeout=self.store.timeout,
                        check_same_thread=False,
                        isolation_level=None,
                    )
                version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                self._close()
                return True  # cannot tell: let the caller look
            changed, self._last = version != self._last, version
            return changed

    def close(self) -> None:
        """Drop the private connection."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self._last = None
