"""The local backend's GPU queue: which waiting jobs get this host's GPUs, in the order
``workbench queue`` shows them (higher priority first, then first come, first served).

One decision for the whole host, made under the placement lock from the store's rows: the
waiting jobs, in queue order, each take the GPUs it fits into (first fit), so a job behind
never takes what one ahead of it can use, and a small job may start while a big one ahead
waits for more GPUs than are free. A supervisor waiting for GPUs takes its share only when
the decision names it (read without the lock; confirmed under it); a supervisor that gives
GPUs back makes the decision and wakes (with SIGUSR1) exactly the supervisors it names, so
the next job starts at once, not at its next poll (every POLL_SECONDS, the fallback, which
decides again only when another process has committed to the store since: the decision is
a function of the store's rows alone).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Iterable, Mapping
from typing import Any

from ..spec import JobStatus
from . import _placement

WAKE_SIGNAL = signal.SIGUSR1
# How often a waiting supervisor checks on its own: only the fallback for a holder that died
# without waking anyone (and for a cancel flag set without a signal).
POLL_SECONDS = 3.0


def priority_value(priority: Any, details: Mapping[str, Any]) -> int:
    """What orders a job in the queue, higher first: the backend's value when it knows one
    (a cluster's PriorityClass), else the spec's priority when it is a number, else 0."""
    known = details.get("priority_value")
    if isinstance(known, int) and not isinstance(known, bool):
        return known
    if isinstance(priority, str) and priority.lstrip("-").isdigit():
        return int(priority)
    return 0


def queue_key(
    priority: Any, details: Mapping[str, Any], created_at: float, name: str
) -> tuple[int, float, str]:
    """Sort key of a waiting job: priority (higher first), then age (older first)."""
    return (-priority_value(priority, details), created_at, name)


def _spec(row: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(row["spec_json"])
    return spec


def decide(rows: Iterable[Mapping[str, Any]], capacity: list[int]) -> dict[str, list[list[int]]]:
    """The waiting jobs of ``rows`` (the store's active local rows) that get GPUs now, each
    with its GPU indices per worker: first fit in queue order over what is not held."""
    held: list[tuple[float, list[list[int]]]] = []
    waiting = []
    for row in rows:
        spec = _spec(row)
        gpus = float(spec.get("gpus") or 0)
        alloc = row["details"].get("gpu_alloc")
        if alloc:
            held.append((gpus, alloc))
        elif gpus > 0 and row["status"] == JobStatus.PENDING.value:
            key = queue_key(spec.get("priority"), row["details"], row["created_at"], row["name"])
            waiting.append((key, row["name"], gpus, int(spec.get("workers") or 1)))
    used = _placement.usage(held)
    chosen: dict[str, list[list[int]]] = {}
    for _, name, gpus, workers in sorted(waiting):
        alloc = _placement.place(gpus, workers, capacity, used)
        if alloc is not None:
            chosen[name] = alloc
            held.append((gpus, alloc))
            used = _placement.usage(held)
    return chosen


def wake(rows: Iterable[Mapping[str, Any]], names: Iterable[str], same_process: Any) -> int:
    """Signal the supervisors of jobs ``names`` (checked against PID reuse); returns how many."""
    wanted = set(names)
    woken = 0
    for row in rows:
        if row["name"] not in wanted:
            continue
        pid, ctime = row["details"].get("supervisor_pid"), row["details"].get("supervisor_ctime")
        if isinstance(pid, int) and same_process(pid, ctime):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, WAKE_SIGNAL)
                woken += 1
    return woken
