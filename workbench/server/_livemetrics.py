"""Live metrics over the event stream: a client subscribes to one job's metrics and the hub
pushes what the job logs, read through ``JobManager.metrics(name, since=cursor)``.

Client -> server frames (text, JSON) on ``{base_url}workbench/api/events``:
``{"type": "subscribe", "metrics": NAME, "since": CURSOR}`` (``since`` optional: "" or
absent = from the first record; else the ``cursor`` of the last metrics frame seen) and
``{"type": "unsubscribe", "metrics": NAME}``. Server -> client:
``{"type": "metrics", "name", "cursor", "scalars": [...], "gpu": [...]}`` only when the job
reported something new (resume from ``cursor``), and ``{"type": "error", "field",
"error", "fix"}`` for a frame it cannot serve (the connection stays open).

On the hub's tick (``job_feed_interval``) every subscription whose job is not finished gets
one incremental read; a finished job is read until it has nothing more, then no longer.
One read is bounded by the reader (``READ_CHUNK`` per file), so a large backlog goes out as
several frames over several ticks, each with a cursor that resumes exactly after it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import SpecError, WorkbenchError
from ..manager import JobManager
from ..monitor.metrics import parse_cursor
from ..spec import JobStatus

# A connection watches a handful of job views at most; more is a runaway client.
MAX_SUBSCRIPTIONS = 16
MAX_NAME = 253
MAX_FRAME = 4096  # bytes of one client frame; subscribe frames are tiny


@dataclass
class Subscription:
    """One client's live view of one job's metrics."""

    name: str
    cursor: str
    done: bool = False  # the job finished and everything it reported was sent


def error_frame(error: SpecError) -> dict[str, Any]:
    """The ``error`` frame for a client frame the server cannot serve."""
    return {"type": "error", "field": error.field, "error": error.message, "fix": error.fix}


def parse_client_frame(raw: str | bytes) -> tuple[str, str, str]:
    """``(type, job name, since)`` of a client frame; SpecError naming the bad field."""
    if len(raw) > MAX_FRAME:
        raise SpecError("frame", f"a client frame is at most {MAX_FRAME} bytes", "send less")
    try:
        frame = json.loads(raw)
    except ValueError:
        raise SpecError(
            "frame", "not JSON", 'send {"type": "subscribe", "metrics": NAME}'
        ) from None
    if not isinstance(frame, dict):
        raise SpecError("frame", "not a JSON object", 'send {"type": "subscribe", ...}')
    kind = frame.get("type")
    if kind not in ("subscribe", "unsubscribe"):
        raise SpecError(
            "type", f"unknown client frame type {str(kind)[:40]!r}", "use subscribe or unsubscribe"
        )
    name = frame.get("metrics")
    if not isinstance(name, str) or not name or len(name) > MAX_NAME:
        raise SpecError("metrics", "must be a job name (a non-empty string)", "name the job")
    since = frame.get("since")
    if since is None:
        since = ""
    if not isinstance(since, str):
        raise SpecError("since", "must be a metrics cursor (a string)", "pass the last cursor")
    parse_cursor(since)  # SpecError("since", ...) for a malformed cursor
    return str(kind), name, since


def read_subscriptions(
    manager: JobManager, subs: list[tuple[int, Subscription]]
) -> list[tuple[int, str, dict[str, Any] | None, bool]]:
    """On a worker thread: for each ``(key, subscription)`` one incremental read.

    Returns ``(key, cursor read from, metrics or None when the job is gone, finished)``;
    the status is read before the metrics, so a finished job's last records are in this
    read or an earlier one.
    """
    out: list[tuple[int, str, dict[str, Any] | None, bool]] = []
    statuses: dict[str, JobStatus | None] = {}
    for key, sub in subs:
        if sub.name not in statuses:
            record = manager.store.get(sub.name)
            statuses[sub.name] = None if record is None else record.status
        status = statuses[sub.name]
        if status is None:
            out.append((key, sub.cursor, None, True))
            continue
        try:
            got = manager.metrics(sub.name, since=sub.cursor)
        except WorkbenchError:  # deleted since the status read
            out.append((key, sub.cursor, None, True))
            continue
        out.append((key, sub.cursor, got, JobStatus(status).terminal))
    return out
