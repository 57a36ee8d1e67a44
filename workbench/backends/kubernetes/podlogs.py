"""Rank logs read from pods: earlier attempts' logs saved in the job folder, then the
current pod's, one rank or every rank prefixed.

Where lane k8sl's ``logcopy`` module is present (its follower, metric splitting and the
copier that saves logs when an attempt ends), ``logs``/``save`` go through it; the minimal
reader below serves until it is merged."""

from __future__ import annotations

import importlib
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.rest import ApiException

from ...spec import JobEvent, JobRecord
from .._jobfiles import JobFiles
from ..base import rank_prefixed
from .cluster import UNREACHABLE, Cluster, raw
from .status import ranks_of
from .tracker import owned_by

if TYPE_CHECKING:
    from .backend import KubernetesBackend

_logcopy: Any  # lane k8sl's logs.py + logcopy.py, where merged
try:
    _logcopy = importlib.import_module(f"{__package__}.logcopy")
except ModuleNotFoundError as e:
    if e.name != f"{__package__}.logcopy":
        raise
    _logcopy = None

READ_TIMEOUT = 2.0  # a followed stream silent this long is re-checked (pod gone? stop set?)


class PodLogs:
    """Reads rank logs through the cluster's pod log API."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def text(self, namespace: str, pod: str) -> str:
        """A pod's whole log (its first container), '' when it cannot be read."""
        try:
            return str(
                raw(self.cluster.core.read_namespaced_pod_log, pod, namespace).data.decode(
                    errors="replace"
                )
            )
        except (ApiException, *UNREACHABLE):
            return ""

    def save(
        self, namespace: str, job_dir: str, pods_by_rank: dict[int, str], attempt: int
    ) -> list[JobEvent]:
        """Copy each rank's log of ``attempt`` into the job folder (before a gang retry
        deletes the pods, and when the job ends); the GPU alerts the pods' agents wrote,
        as job events."""
        if _logcopy is not None:
            copier = _logcopy.LogCopier(self.cluster.core, namespace, Path(job_dir))
            copier.copy(pods_by_rank, attempt)
            return copier.alerts
        files = JobFiles(Path(job_dir))
        files.logs.mkdir(parents=True, exist_ok=True)  # launch makes the job folder only
        for rank, pod in sorted(pods_by_rank.items()):
            text = self.text(namespace, pod)
            with files.open_log(rank, attempt) as f:
                f.write(text.encode())
        return []  # without the copier the records stay in the text: no alerts to read

    def pods_by_rank(self, record: JobRecord) -> dict[int, str]:
        """Rank -> the current attempt's pod."""
        d = record.details
        pods = [
            p for p in self.cluster.pods(d["namespace"], record.name) if owned_by(p, d.get("uid"))
        ]
        return {r: v.log_pod or v.pod for r, v in ranks_of(pods).items()}

    def _pod(self, record: JobRecord, rank: int) -> dict[str, Any] | None:
        d = record.details
        pods = [
            p for p in self.cluster.pods(d["namespace"], record.name) if owned_by(p, d.get("uid"))
        ]
        view = ranks_of(pods).get(rank)
        return (
            next((p for p in pods if p["metadata"]["name"] == (view.log_pod or view.pod)), None)
            if view
            else None
        )

    def rank_lines(self, backend: KubernetesBackend, record: JobRecord, rank: int, follow: bool,
                   tail: int | None, stop: threading.Event | None) -> Iterator[str]:  # fmt: skip
        """One rank's lines: saved attempts, the attempt marker, then its pod's log."""
        saved: list[str] = []
        if record.job_dir:
            path = JobFiles(Path(record.job_dir)).log_path(rank)
            if path.exists():
                saved = path.read_text(errors="replace").splitlines()
        if record.attempt > 1:
            saved.append(f"[workbench] ---- attempt {record.attempt} ----")
        if not follow:
            lines = saved + self._current(record, rank)
            yield from lines[-tail:] if tail is not None else lines
            return
        yield from saved[-tail:] if tail is not None else saved
        yield from self._follow(backend, record, rank, stop)

    def _current(self, record: JobRecord, rank: int) -> list[str]:
        try:
            pod = self._pod(record, rank)
        except (ApiException, *UNREACHABLE):
            return []
        return (
            self.text(record.details["namespace"], pod["metadata"]["name"]).splitlines()
            if pod
            else []
        )

    def _follow(self, backend: KubernetesBackend, record: JobRecord, rank: int,
                stop: threading.Event | None) -> Iterator[str]:  # fmt: skip
        ns, sent, pod_name = record.details["namespace"], 0, ""
        while not (stop is not None and stop.is_set()):
            pod = self._pod(record, rank)
            phase = ((pod or {}).get("status") or {}).get("phase", "Pending")
            if pod is None or phase == "Pending":
                if backend.get(record.name).status.terminal:
                    return
                time.sleep(0.2)  # not started yet: nothing to read
                continue
            if pod["metadata"]["name"] != pod_name:
                pod_name, sent = pod["metadata"]["name"], 0
            done = phase in ("Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp")
            try:
                resp = raw(self.cluster.core.read_namespaced_pod_log, pod_name, ns,
                           follow=not done, _request_timeout=(10, READ_TIMEOUT))  # fmt: skip
                seen, pending = 0, b""
                for chunk in resp.stream(amt=None, decode_content=False):
                    pending += chunk
                    *lines, pending = pending.split(b"\n")
                    for line in lines:
                        seen += 1
                        if seen > sent:  # a reconnect re-reads from the start: skip what was sent
                            sent = seen
                            yield line.decode(errors="replace")
                    if stop is not None and stop.is_set():
                        return
                if pending and done:
                    yield pending.decode(errors="replace")
                if done:
                    return
            except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
                continue  # silent for a while: look at the pod again
            except (ApiException, *UNREACHABLE):
                if backend.get(record.name).status.terminal:
                    return
                time.sleep(0.2)

    def stage(self, namespace: str, job_dir: str | None, pods_by_rank: dict[int, str],
              attempt: int, seconds: float | None = None) -> Any:  # fmt: skip
        """Read each rank's log of ``attempt`` for commit() or discard() (a cancel: read
        before its delete, kept once the delete is sent), for at most ``seconds``; None
        when there is nothing."""
        if _logcopy is None or not job_dir or not pods_by_rank:
            return None
        copier = _logcopy.LogCopier(self.cluster.core, namespace, Path(job_dir))
        deadline = None if seconds is None else time.monotonic() + seconds
        return copier, copier.stage(pods_by_rank, attempt, deadline)

    @staticmethod
    def commit(staged: Any) -> list[JobEvent]:
        """Keep what stage() read; the GPU alerts in it, as job events."""
        if staged is None:
            return []
        copier, copies = staged
        copier.commit(copies)
        alerts: list[JobEvent] = copier.alerts
        return alerts

    @staticmethod
    def discard(staged: Any) -> None:
        """Drop what stage() read."""
        if staged is not None:
            staged[0].discard(staged[1])

    def lines(self, backend: KubernetesBackend, record: JobRecord, rank: int | None, follow: bool,
              tail: int | None, stop: threading.Event | None) -> Iterator[str]:  # fmt: skip
        """One rank, or every rank merged (each line prefixed with its rank)."""
        if _logcopy is not None and record.job_dir:
            copier = _logcopy.LogCopier(self.cluster.core, record.details["namespace"],
                                        Path(record.job_dir))  # fmt: skip
            # The last attempt each rank has shown: what its copy holds, before any live pod.
            shown = {r: copier.copied_attempt(r) for r in range(record.workers)}

            def current() -> dict[int, str]:
                # A gang retry re-creates the workload under a new uid: read the record
                # again, so a follower moves on to the new attempt's pods.
                return self.pods_by_rank(backend.get(record.name))

            def announce(r: int, pod: str) -> str | None:
                attempt, before = backend.get(record.name).attempt, shown.get(r, 0)
                shown[r] = max(attempt, before)
                if attempt <= max(1, before):
                    return None  # the first attempt, or the same one (one pod replaced)
                return f"[workbench] ---- attempt {attempt} ----"  # as the copy will hold it

            yield from _logcopy.job_logs(
                self.cluster.core, record.details["namespace"], Path(record.job_dir),
                current, rank, follow, tail, stop,
                attempt=record.attempt, world=record.workers,
                finished=lambda: backend.get(record.name).status.terminal, announce=announce,
            )  # fmt: skip
            return
        if rank is not None:
            yield from self.rank_lines(backend, record, rank, follow, tail, stop)
            return
        ranks = range(record.workers)
        if not follow:
            for r in ranks:
                for line in self.rank_lines(backend, record, r, False, tail, stop):
                    yield rank_prefixed(r, line)
            return
        out: queue.Queue[tuple[int, str | None]] = queue.Queue(maxsize=10_000)

        def pump(r: int) -> None:
            try:
                for line in self.rank_lines(backend, record, r, True, tail, stop):
                    out.put((r, line))
            finally:
                out.put((r, None))

        for r in ranks:
            threading.Thread(target=pump, args=(r,), daemon=True).start()
        left = len(ranks)
        while left:
            r, item = out.get()
            if item is None:
                left -= 1
            else:
                yield rank_prefixed(r, item)
