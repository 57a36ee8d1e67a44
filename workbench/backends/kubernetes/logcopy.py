"""A Kubernetes job's logs and metric records, copied into its job folder when an attempt
ends, so ``workbench logs`` and the charts outlive the pods' garbage collection.

Layout as local jobs have it (``_jobfiles.JobFiles``): JOB_DIR/logs/rank-N.log holds every
attempt of rank N, later ones after a ``[workbench] ---- attempt K ----`` line, byte for byte
without the metric records, which go to JOB_DIR/metrics/ (``write_metric_records``). A
marker per rank (``logs/.copied-rank-N``, holding the attempt copied last) makes a copy
happen once; a copy cut short is redone, since the log file is replaced in one rename
before its marker is written. The in-image agent's GPU alert records become job events
(``alert_events``, collected in ``LogCopier.alerts``), as the local host recorder makes its
own alerts events; the caller adds the ones the job does not have yet, so a redone copy
adds none twice.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client.rest import ApiException
from urllib3.exceptions import HTTPError

from ...monitor.metrics import MetricSink
from ...monitor.stream import split_metric_lines
from ...spec import JobEvent
from .._jobfiles import JobFiles
from .._logread import read_logs
from .logs import _chunks, _open, _release, rank_logs

COPIED_MARK = ".copied-rank-{rank}"
# The line where a deadline stopped reading a copy (a cancel's: bounded, as the user waits
# for it). The log's last lines follow it, read then (TAIL_*): the end of a runaway log is
# often the part that says why it ran away. A rank not reached by the deadline gets its
# last lines alone, after NOT_REACHED. The rest went with the pods.
CUT_SHORT = "[workbench] ---- the copy stops here: the rest of this log was not read in time ----\n"
TAIL_FOLLOWS = "[workbench] ---- its last lines, read then (some may repeat the lines above) ----\n"
NOT_REACHED = "[workbench] ---- the log before its last lines was not read in time ----\n"
TAIL_LINES = 1000
TAIL_BYTES = 1 << 20
TAIL_SECONDS = 5.0  # after the deadline, for every rank's last lines together
HUGE_LINE = 1 << 20  # a line this long without a newline is no record: written through


def write_metric_records(job_dir: Path, rank: int, records: list[dict[str, Any]]) -> None:
    """Append one rank's metric records to the job's metric files, routed as the local
    runtimes' copiers route them (``MetricSink``: scalars, GPU samples, the agent's other
    records), so ``Backend.metrics`` reads a cluster job like a local one."""
    sink = MetricSink(job_dir, rank)
    try:
        sink.write(list(records))
    finally:
        sink.close()


def alert_events(records: list[dict[str, Any]], rank: int) -> list[JobEvent]:
    """The agent's ``kind: alert`` records as job events, named as the local host
    recorder names them (``GpuAlert:KIND``, ``GpuAlertCleared:KIND``), with the rank."""
    events: list[JobEvent] = []
    for record in records:
        alert = record.get("alert")
        if record.get("kind") != "alert" or not isinstance(alert, dict):
            continue
        r = record.get("rank")
        where = f"rank {r if isinstance(r, int) and not isinstance(r, bool) else rank}"
        kind, message = str(alert.get("kind") or "gpu"), str(alert.get("message") or "")
        try:
            since, cleared = float(alert.get("since") or 0), alert.get("cleared")
            cleared = None if cleared is None else float(cleared)
        except (TypeError, ValueError):
            continue  # a foreign record: nothing to date it by
        if cleared is None and record.get("active", True):
            level = "error" if alert.get("level") == "error" else "warning"
            events.append(JobEvent(since, f"GpuAlert:{kind}", f"{where}: {message}", level))
        else:
            when = cleared if cleared is not None else since
            events.append(JobEvent(when, f"GpuAlertCleared:{kind}", f"{where}: cleared: {message}"))
    return events


@dataclass
class StagedCopy:
    """One rank's log of one attempt, read into ``part`` (LogCopier.stage)."""

    rank: int
    attempt: int
    part: Path
    records: list[dict[str, Any]]
    size: int


class LogCopier:
    """Copies each rank's log of one attempt into the job folder (see the module doc)."""

    def __init__(self, core_api: Any, namespace: str, job_dir: Path,
                 container: str | None = None) -> None:  # fmt: skip
        self.core_api = core_api
        self.namespace = namespace
        self.files = JobFiles(Path(job_dir))
        self.container = container
        self.alerts: list[JobEvent] = []  # the agent's alerts in what copy() copied

    def _mark(self, rank: int) -> Path:
        return self.files.logs / COPIED_MARK.format(rank=rank)

    def copied_attempt(self, rank: int) -> int:
        """The last attempt of ``rank`` copied whole (0: none)."""
        try:
            return int(self._mark(rank).read_text() or 1)
        except (OSError, ValueError):
            return 0

    def copied(self, rank: int, attempt: int = 1) -> bool:
        """True once attempt ``attempt`` of ``rank`` is copied whole."""
        return self.copied_attempt(rank) >= attempt

    def copy(self, pods_by_rank: dict[int, str], attempt: int = 1) -> dict[int, int]:
        """Copy attempt ``attempt`` of every rank not copied yet; {rank: bytes of output}.

        A pod already gone is skipped (nothing is left to copy); call it for each attempt
        before the attempt's pods are deleted (a gang retry) and when the job ends."""
        return self.commit(self.stage(pods_by_rank, attempt))

    def stage(self, pods_by_rank: dict[int, str], attempt: int = 1,
              deadline: float | None = None) -> list[StagedCopy]:  # fmt: skip
        """Read each rank's log of ``attempt`` (not copied yet) into a file beside its copy,
        for commit() or discard(): a cancel reads the logs before its delete (the pods go
        with the workload) and keeps them only once the delete is sent. With ``deadline``
        (a time.monotonic() value) the reading stops there: a rank cut short says so in
        its copy, then holds its last lines; ranks not reached by then get their last
        lines alone. Those tails have TAIL_SECONDS after the deadline, all ranks together;
        a rank whose tail is not read by then is not copied."""
        self.files.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # private, as at launch
        self.files.logs.mkdir(exist_ok=True)
        staged: list[StagedCopy] = []
        try:
            for rank, pod in sorted(pods_by_rank.items()):
                if self.copied(rank, attempt):
                    continue
                if deadline is not None and time.monotonic() >= deadline:
                    one = self._stage_tail(rank, pod, attempt, deadline + TAIL_SECONDS)
                else:
                    one = self._stage_rank(rank, pod, attempt, deadline)
                if one is not None:
                    staged.append(one)
        except BaseException:
            self.discard(staged)
            raise
        return staged

    def commit(self, staged: list[StagedCopy]) -> dict[int, int]:
        """Put staged copies in place: the log, its metric records and alerts, the mark
        that the attempt is copied; {rank: bytes of output}."""
        sizes: dict[int, int] = {}
        for one in staged:
            write_metric_records(self.files.dir, one.rank, one.records)
            self.alerts.extend(alert_events(one.records, one.rank))
            os.replace(one.part, self.files.log_path(one.rank))
            self._mark(one.rank).write_text(str(one.attempt))
            sizes[one.rank] = one.size
        return sizes

    @staticmethod
    def discard(staged: list[StagedCopy]) -> None:
        """Drop staged copies (the cancel they were read for did not go through)."""
        for one in staged:
            one.part.unlink(missing_ok=True)

    def _stage_rank(self, rank: int, pod: str, attempt: int,
                    deadline: float | None = None) -> StagedCopy | None:  # fmt: skip
        read_timeout = 120.0
        if deadline is not None:
            read_timeout = max(1.0, min(read_timeout, deadline - time.monotonic()))
        try:
            resp = _open(self.core_api, self.namespace, pod, self.container, follow=False,
                         tail=None, read_timeout=read_timeout)  # fmt: skip
        except ApiException as e:
            if e.status in (400, 404):  # gone, or never started: no log
                return None
            raise
        part = self._part(rank)
        records: list[dict[str, Any]] = []
        size = 0
        pending = b""
        try:
            with open(part, "wb") as f:
                self._earlier(f, rank, attempt)
                for chunk in _chunks(resp):
                    *lines, pending = (pending + chunk).split(b"\n")
                    size += _split_into(f, [x + b"\n" for x in lines], records)
                    if len(pending) > HUGE_LINE:
                        size += _split_into(f, [pending], records)
                        pending = b""
                    if deadline is not None and time.monotonic() >= deadline:
                        size += _split_into(f, [pending + b"\n"] if pending else [], records)
                        f.write(CUT_SHORT.encode())
                        resp.close()  # unread: its connection must not go back to the pool
                        tail = self._tail(pod, deadline + TAIL_SECONDS)
                        if tail:
                            f.write(TAIL_FOLLOWS.encode())
                            size += _split_into(f, tail, records)
                        return StagedCopy(rank, attempt, part, records, size)
                size += _split_into(f, [pending] if pending else [], records)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        finally:
            _release(resp)
        return StagedCopy(rank, attempt, part, records, size)

    def _part(self, rank: int) -> Path:
        final = self.files.log_path(rank)
        return final.with_name(final.name + ".part")

    def _earlier(self, f: Any, rank: int, attempt: int) -> None:
        """Start a copy of ``attempt`` > 1 with the earlier attempts' copy and the attempt's
        line, as local retries keep them."""
        if attempt > 1:
            final = self.files.log_path(rank)
            marker = f"[workbench] ---- attempt {attempt} ----\n".encode()
            if final.exists():
                _copy_before(final, f, marker)
            f.write(marker)

    def _stage_tail(self, rank: int, pod: str, attempt: int, until: float) -> StagedCopy | None:
        """A copy of the rank's last lines alone, read by ``until``; None when there are none."""
        tail = self._tail(pod, until)
        if not tail:
            return None
        part = self._part(rank)
        records: list[dict[str, Any]] = []
        try:
            with open(part, "wb") as f:
                self._earlier(f, rank, attempt)
                f.write(NOT_REACHED.encode())
                size = _split_into(f, tail, records)
        except BaseException:
            part.unlink(missing_ok=True)
            raise
        return StagedCopy(rank, attempt, part, records, size)

    def _tail(self, pod: str, until: float) -> list[bytes]:
        """The pod's last TAIL_LINES whole lines (TAIL_BYTES at most, from their start), as
        read by ``until``; none when the pod cannot be read by then."""
        left = until - time.monotonic()
        if left <= 0:
            return []
        data = b""
        try:
            resp = _open(self.core_api, self.namespace, pod, self.container, follow=False,
                         tail=TAIL_LINES, read_timeout=max(0.5, left))  # fmt: skip
            try:
                for chunk in _chunks(resp):
                    data += chunk
                    if len(data) >= TAIL_BYTES or time.monotonic() >= until:
                        resp.close()  # unread: its connection must not go back to the pool
                        data = data[:TAIL_BYTES]
                        break
            finally:
                _release(resp)
        except (ApiException, HTTPError, OSError):  # gone, or did not answer in time
            pass
        lines = data.split(b"\n")[:-1]  # whole lines only: a cut one is not a line
        return [x + b"\n" for x in lines]


def _copy_before(src: Path, f: Any, marker: bytes) -> None:
    """Copy ``src`` into ``f`` up to the line ``marker``, when it holds one (an earlier
    copy of this same attempt whose mark a crash left unwritten), so copying an attempt
    again never holds it twice."""
    with open(src, "rb") as before:
        size = os.fstat(before.fileno()).st_size
        end = size
        if size:
            with mmap.mmap(before.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                at = mm.rfind(marker)
                if at == 0 or (at > 0 and mm[at - 1 : at] == b"\n"):
                    end = at
        left = end
        while left > 0:
            chunk = before.read(min(left, 1 << 20))
            if not chunk:
                break
            f.write(chunk)
            left -= len(chunk)


def _split_into(f: Any, lines: list[bytes], records: list[dict[str, Any]]) -> int:
    """Write the user lines of ``lines`` to ``f`` byte for byte; collect the records."""
    if not lines:
        return 0
    # surrogateescape: bytes that are not UTF-8 come back unchanged when re-encoded
    text = [x.decode("utf-8", "surrogateescape") for x in lines]
    user, found = split_metric_lines(text)
    records.extend(found)
    data = "".join(user).encode("utf-8", "surrogateescape")
    f.write(data)
    return len(data)


def job_logs(
    core_api: Any,
    namespace: str,
    job_dir: Path,
    pods_by_rank: Callable[[], dict[int, str]],
    rank: int | None = 0,
    follow: bool = False,
    tail: int | None = None,
    stop: threading.Event | None = None,
    *,
    attempt: int = 1,
    world: int | None = None,
    **kwargs: Any,
) -> Iterator[str]:
    """``Backend.logs`` for a Kubernetes job: the copies once the current ``attempt`` is
    copied for every rank asked for (the pods may be gone), else earlier attempts' copies
    followed by the pods' logs (``rank_logs``; ``kwargs`` go to it)."""
    copier = LogCopier(core_api, namespace, job_dir, kwargs.get("container"))
    if rank is not None:
        ranks = [rank]
    elif world is not None:
        ranks = list(range(world))
    else:
        done = [int(p.name.rsplit("-", 1)[1]) for p in copier.files.logs.glob(".copied-rank-*")]
        ranks = sorted(set(pods_by_rank()) | set(done))
    if ranks and all(copier.copied(r, attempt) for r in ranks):
        paths = [(r, copier.files.log_path(r)) for r in ranks]
        yield from read_logs(paths, False, tail, lambda: True, stop, prefix=rank is None)
        return
    saved = {r: copier.files.log_path(r) for r in ranks if copier.copied_attempt(r) > 0}
    yield from rank_logs(core_api, namespace, pods_by_rank, rank, follow, tail, stop,
                         world=world, saved=saved, **kwargs)  # fmt: skip
