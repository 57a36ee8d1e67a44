"""What training scripts import to report progress: ``run.log(step=i, total=n, loss=l)``.

Outside a workbench job (neither WORKBENCH_JOB_NAME nor WORKBENCH_JOB_DIR set) every call
is a no-op, so a script runs unchanged anywhere. Inside one, records travel in the rank's
own output stream (the stdout file descriptor), framed as the monitoring agent frames its
GPU records: one line ``METRIC_PREFIX + {"kind": "scalars", "time", "rank", "step",
"total", <scalars>}``. The backend's log copier splits them off into the job's metrics
(``workbench.monitor.metrics``), so a pod on another node reports like a local process,
and the user's log never shows them.

Cost: a call compares a clock and swaps one tuple. Each rank keeps the latest record per
slot of WORKBENCH_RUN_INTERVAL seconds (default 0.02; 0 keeps every call); serialising and
writing happen in batches (every ``FLUSH_SECONDS`` from a daemon thread, on ``flush()``
and at exit), each write whole lines of at most ``PIPE_BUF`` bytes, so on a pipe no other
writer (the user's prints, a DataLoader worker) can land inside a record. A write error
drops the batch: reporting never breaks training.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import select
import threading
import time
from collections import deque
from typing import Any

__all__ = ["enabled", "flush", "log"]

FLUSH_SECONDS = 0.5
FLUSH_RECORDS = 10_000
# Each rank keeps the latest record per slot of this many seconds (calls within a slot at
# the same step merge their scalars). 50 records/s per rank is far more than a chart or a
# progress bar can show, keeps the metric files small on long runs, and makes a call cost
# a tuple and a comparison. WORKBENCH_RUN_INTERVAL=0 keeps every record.
DEFAULT_INTERVAL = 0.02

Record = tuple[float, int | None, int | None, dict[str, Any]]

_lock = threading.Lock()
_buffer: list[Record] = []
# The pending record of the current slot. A deque of one is swapped atomically by the hot
# path (append replaces) and the flusher thread (popleft takes), so neither needs a lock.
_slot: deque[Record] = deque(maxlen=1)
_ready = False
_fd: int | None = None  # a private duplicate of the stdout the rank started with
_rank = 0
_interval = DEFAULT_INTERVAL
_slot_end = 0.0
_next_flush = 0.0
_templates: dict[tuple[str, ...], str] = {}
# The frame workbench.monitor.stream defines; copied, not imported, so that importing
# workbench.run stays cheap (no json/regex helpers of the monitor package at import).
METRIC_PREFIX = "\x1f@wb-metric "
_RESERVED = frozenset(("kind", "time", "rank", "step", "total"))
# Writes to a pipe up to this size are atomic (POSIX PIPE_BUF; 4096 on Linux).
PIPE_BUF = getattr(select, "PIPE_BUF", 512)
_time = time.time


def _setup() -> None:
    """Read the job's env once per process (again after a fork)."""
    global _ready, _fd, _rank, _interval, _next_flush
    in_job = os.environ.get("WORKBENCH_JOB_NAME") or os.environ.get("WORKBENCH_JOB_DIR")
    try:
        _rank = int(os.environ.get("WORKBENCH_RANK") or os.environ.get("RANK") or 0)
    except ValueError:
        _rank = 0
    try:
        _interval = max(0.0, float(os.environ.get("WORKBENCH_RUN_INTERVAL", DEFAULT_INTERVAL)))
    except ValueError:
        _interval = DEFAULT_INTERVAL
    if _fd is not None:  # a forked child's copy of its parent's duplicate
        with contextlib.suppress(OSError):
            os.close(_fd)
    _fd = None
    if in_job:
        try:
            # A duplicate (not inherited by children): a script that later points fd 1
            # elsewhere (a file, a tee) still reports into the rank's stream.
            _fd = os.dup(1)
        except OSError:
            _fd = None  # no stdout at all: nothing to report into, training goes on
    _ready = True
    _next_flush = _time() + FLUSH_SECONDS
    if _fd is not None:
        _start_flusher()


def enabled() -> bool:
    """True when this process runs inside a workbench job (calls are recorded)."""
    if not _ready:
        _setup()
    return _fd is not None


def log(
    step: int | None = None, total: int | None = None, *, rank: int | None = 0, **scalars: Any
) -> None:
    """Record ``scalars`` at ``step`` (of ``total``); only rank ``rank`` records (None: all)."""
    global _slot_end
    if _fd is None:
        if _ready:
            return
        _setup()
        if _fd is None:
            return
    if rank is not None and rank != _rank:
        return
    now = _time()
    if now < _slot_end:
        if step is not None:
            try:
                last = _slot[0]
                if last[1] == step:
                    scalars = {**last[3], **scalars}
            except IndexError:
                pass
        _slot.append((now, step, total, scalars))
        return
    try:
        _buffer.append(_slot.popleft())
    except IndexError:
        pass
    _slot.append((now, step, total, scalars))
    _slot_end = now + _interval
    if now >= _next_flush or len(_buffer) >= FLUSH_RECORDS:
        flush()


def flush() -> None:
    """Write every record so far into the output stream, as whole framed lines."""
    global _next_flush
    with _lock:
        try:
            _buffer.append(_slot.popleft())
        except IndexError:
            pass
        _next_flush = _time() + FLUSH_SECONDS
        if not _buffer:
            return
        batch = _buffer[:]
        del _buffer[:]
        if _fd is None:
            return
        for data in _chunks(_serialise(batch, _rank)):
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(_fd, view) :]
            except OSError:
                return  # reporting is best effort (no reader, full disk): training goes on


def _chunks(lines: list[str]) -> list[bytes]:
    """Framed lines joined into writes of at most PIPE_BUF bytes (a longer line alone)."""
    out: list[bytes] = []
    current: list[bytes] = []
    size = 0
    for line in lines:
        data = line.encode()
        if current and size + len(data) > PIPE_BUF:
            out.append(b"".join(current))
            current, size = [], 0
        current.append(data)
        size += len(data)
    if current:
        out.append(b"".join(current))
    return out


def _serialise(batch: list[Record], rank: int) -> list[str]:
    """Framed lines (newline included) for a batch; a per-key-set %-template keeps this
    fast for plain numbers."""
    out: list[str] = []
    for now, step, total, scalars in batch:
        keys = tuple(scalars)
        values = [_number(scalars[k]) for k in keys]
        step_v = _number(step)
        total_v = _number(total)
        plain = all(type(v) in (int, float) for v in (step_v, total_v, *values) if v is not None)
        if plain and not _RESERVED.intersection(keys):
            template = _templates.get(keys)
            if template is None:
                fields = "".join(f", {json.dumps(k)}: %s" for k in keys)
                template = _templates[keys] = (
                    METRIC_PREFIX
                    + '{"kind": "scalars", "time": %r, "rank": %d, "step": %s, "total": %s'
                    + fields
                    + "}\n"
                )
            out.append(
                template
                % (
                    now,
                    rank,
                    _json_number(step_v),
                    _json_number(total_v),
                    *map(_json_number, values),
                )
            )
        else:
            record = {"kind": "scalars", "time": now, "rank": rank, "step": step_v}
            record["total"] = total_v
            record.update({k: v for k, v in zip(keys, values, strict=True) if k not in record})
            out.append(METRIC_PREFIX + json.dumps(record, default=str) + "\n")
    return out


def _number(value: Any) -> Any:
    """Plain numbers stay; tensors and numpy scalars become floats; NaN/inf become null."""
    if value is None or type(value) in (int, str, bool):
        return value
    try:
        number = value if type(value) is float else float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None  # JSON has no NaN or inf


def _json_number(value: Any) -> str:
    """A JSON number (already made finite by ``_number``), or null."""
    return "null" if value is None else repr(value)


def _start_flusher() -> None:
    """A daemon thread that flushes a quiet script's last records within a second."""

    def loop() -> None:
        while not _stop.wait(FLUSH_SECONDS):
            if _slot or _buffer:
                flush()

    threading.Thread(target=loop, name="workbench-run-flush", daemon=True).start()


_stop = threading.Event()


def _after_fork_in_child() -> None:
    # A forked worker (DataLoader) has its own rank env or none: start afresh, drop the copy.
    global _ready
    del _buffer[:]
    _slot.clear()
    _ready = False


def _at_exit() -> None:
    _stop.set()
    flush()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)
