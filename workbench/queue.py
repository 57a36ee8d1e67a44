"""``workbench queue``: the jobs waiting for resources on every backend, in the order they
are served (priority, then age), with why each waits.

Reads JobRecords only (the manager's list over every backend): the local supervisor's
Queued jobs and the cluster's Pending ones alike. A cluster backend says why a job waits in
the record's reason and message (``Unschedulable`` with the scheduler's text, ``Queued``
while a Volcano queue or PodGroup holds it) and may add ``details["queue"]``,
``details["priority_class"]`` and ``details["priority_value"]``.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .backends.gpu_queue import priority_value
from .spec import JobRecord, JobStatus
from .tables import format_duration, table


@dataclass(frozen=True)
class QueueEntry:
    """One waiting job: where it waits, how urgent it is, and why it waits."""

    name: str
    backend: str
    priority: str | None  # the priority class's name, as given
    priority_value: int  # what orders the queue: higher first (0 when unknown)
    queue: str | None
    created_at: float
    reason: str | None
    message: str
    workers: int
    gpus_per_worker: float

    def to_dict(self) -> dict[str, Any]:
        """The ``-o json`` form."""
        return {
            "name": self.name,
            "backend": self.backend,
            "priority": self.priority,
            "priority_value": self.priority_value,
            "queue": self.queue,
            "created_at": self.created_at,
            "waiting": round(max(0.0, time.time() - self.created_at), 3),
            "reason": self.reason,
            "message": self.message,
            "workers": self.workers,
            "gpus_per_worker": self.gpus_per_worker,
        }


def queue_entries(records: Iterable[JobRecord]) -> list[QueueEntry]:
    """The Pending jobs of ``records`` in the order they are served: higher priority first,
    then the older first (first come, first served)."""
    entries = [
        QueueEntry(
            name=r.name,
            backend=r.backend,
            priority=r.details.get("priority_class") or r.spec.get("priority"),
            priority_value=priority_value(r.spec.get("priority"), r.details),
            queue=r.details.get("queue") or r.spec.get("queue"),
            created_at=r.created_at,
            reason=r.reason,
            message=r.message or "",
            workers=r.workers,
            gpus_per_worker=r.gpus_per_worker,
        )
        for r in records
        if r.status is JobStatus.PENDING
    ]
    # the order the local backend serves its GPU queue in (backends.gpu_queue)
    return sorted(entries, key=lambda e: (-e.priority_value, e.created_at, e.name))


def queue_table(entries: list[QueueEntry]) -> str:
    """The text form: position, job, backend, priority, resources, wait, reason, message."""
    if not entries:
        return "no job is waiting"
    now = time.time()
    rows = [
        (
            str(i),
            e.name,
            e.backend + (f"/{e.queue}" if e.queue else ""),
            f"{e.priority or '-'} ({e.priority_value})",
            f"{e.workers}x{e.gpus_per_worker:g}",
            format_duration(max(0.0, now - e.created_at)),
            e.reason or "-",
            e.message or "-",
        )
        for i, e in enumerate(entries, 1)
    ]
    headers = ("#", "NAME", "BACKEND/QUEUE", "PRIORITY", "GPUS", "WAITING", "REASON", "MESSAGE")
    return table(headers, rows)
