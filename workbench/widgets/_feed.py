"""What a live job view needs, read incrementally and kept bounded (no ipywidgets here).

A ``JobFeed`` is polled by the widget's refresh thread: each ``poll()`` costs a look at the
store's change feed (the record is read only when it changed), a tail read of the chosen
rank's log and the metric records reported since the last poll (``JobManager.metrics`` with
the cursor it returned; a flood is sampled, at most a bounded read per poll), however large
the files and however chatty the job. Memory stays bounded: the last ``log_lines`` lines,
``max_points`` points per scalar series.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import BackendUnavailableError
from ..manager import LIVENESS, JobManager
from ..spec import JobRecord

LOG_LINES = 40
LINE_CHARS = 300
MAX_POINTS = 200


class JobHandle(Protocol):
    """What a job view needs of a job handle (``workbench.api.Job`` is one)."""

    name: str
    manager: JobManager


# Terminal control sequences (colours, cursor moves, titles): the HTML view strips them.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")


@dataclass
class Series:
    """One scalar's points (step, value), thinned to stay under ``MAX_POINTS``."""

    name: str
    steps: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)
    count: int = 0  # points ever received, before thinning

    def add(self, step: float, value: float) -> None:
        """Append a point; halve the resolution when full (keeps the shape, bounded memory)."""
        self.steps.append(step)
        self.values.append(value)
        self.count += 1
        if len(self.steps) > MAX_POINTS:
            last_step, last_value = self.steps[-1], self.values[-1]
            self.steps = [*self.steps[:-1:2], last_step]
            self.values = [*self.values[:-1:2], last_value]


@dataclass
class Progress:
    """Latest step, total and a rate estimate from the reported records."""

    step: int | None = None
    total: int | None = None
    first: tuple[float, int] | None = None  # (time, step) of the first record seen
    last: tuple[float, int] | None = None

    def eta(self) -> float | None:
        """Seconds left at the average rate so far, or None when unknown."""
        if self.first is None or self.last is None or self.total is None or self.step is None:
            return None
        dt, ds = self.last[0] - self.first[0], self.last[1] - self.first[1]
        if dt <= 0 or ds <= 0:
            return None
        return max(0.0, (self.total - self.step) * dt / ds)


class JobFeed:
    """Incremental view of one job: record, the chosen rank's log tail, scalars, GPU samples."""

    def __init__(self, manager: JobManager, name: str, log_lines: int = LOG_LINES) -> None:
        self.manager = manager
        self.name = name
        self.rank = 0
        self.log_lines = log_lines
        self.record: JobRecord | None = None
        self.log: list[str] = []
        self.series: dict[str, Series] = {}
        self.progress = Progress()
        self.gpus: dict[tuple[Any, Any], dict[str, Any]] = {}
        self._since = 0  # the newest change id of the store's feed seen so far
        self._read_at = 0.0  # when the record was last known fresh (monotonic)
        self.cursor = ""  # where the last metrics read ended ("" = the start)

    def poll(self) -> JobRecord:
        """Refresh everything once; returns the current record."""
        self.record = record = self._current_record()
        self.log = self._log_tail(record)
        self._read_metrics()
        return record

    def _current_record(self) -> JobRecord:
        """The job's record, from the store's change feed: re-read only when the feed says
        it changed, or every ``LIVENESS`` seconds through the backend (a runner that dies
        writes nothing; the backend's read notices it)."""
        now = time.monotonic()
        if self.record is None or now - self._read_at >= LIVENESS:
            self._since = self.manager.last_change_id()  # before the read: nothing is missed
            self._read_at = now
            return self.manager.get(self.name)
        batch = self.manager.changes(self._since)
        self._since = batch.last_id
        if batch.reset or self.name in batch.deleted:
            self._read_at = now
            return self.manager.get(self.name)  # raises JobNotFoundError once it is gone
        for changed in batch.jobs:
            if changed.name == self.name:
                self._read_at = now
                return changed
        return self.record

    def _log_tail(self, record: JobRecord) -> list[str]:
        if self.rank >= record.workers:
            self.rank = 0
        # What a terminal shows (the newest state of a '\r' progress bar), read from the end
        # at a bounded cost however large the log; colour codes are stripped for HTML.
        lines = []
        for raw in self.manager.log_tail(self.name, rank=self.rank, lines=self.log_lines):
            line = ANSI.sub("", raw) if "\x1b" in raw else raw
            lines.append(line if len(line) <= LINE_CHARS else line[:LINE_CHARS] + " …")
        return lines

    def _read_metrics(self) -> None:
        """Only the records reported since the last poll, through the manager."""
        try:
            got = self.manager.metrics(self.name, since=self.cursor)
        except BackendUnavailableError:
            return  # its backend is not installed in this kernel: the record shows, no chart
        self.cursor = got.get("cursor", self.cursor)
        for rec in got["scalars"]:
            self._add_scalars(rec)
        for rec in got["gpu"]:
            key = (rec.get("rank"), rec.get("index", rec.get("uuid")))
            self.gpus[key] = rec

    def _add_scalars(self, rec: dict[str, Any]) -> None:
        rank = rec.get("rank", 0)
        step = rec.get("step")
        when = rec.get("time")
        if isinstance(step, (int, float)):
            p = self.progress
            if p.step is None or step >= p.step:
                p.step = int(step)
                total = rec.get("total")
                p.total = int(total) if isinstance(total, (int, float)) else p.total
                if isinstance(when, (int, float)):
                    p.last = (float(when), int(step))
                    if p.first is None:
                        p.first = p.last
        for key, value in rec.items():
            if key in ("time", "rank", "step", "total") or isinstance(value, bool):
                continue
            if not isinstance(value, (int, float)):
                continue
            name = key if rank in (0, None) else f"{key}[rank {rank}]"
            series = self.series.get(name)
            if series is None:
                series = self.series[name] = Series(name)
            x = float(step) if isinstance(step, (int, float)) else float(series.count)
            series.add(x, float(value))
