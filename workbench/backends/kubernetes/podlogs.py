"""Rank logs read from pods (minimal; lane k8sl's logs.py replaces the pod reading with
its follower and copier): earlier attempts' logs saved in the job folder, then the
current pod's, one rank or every rank prefixed."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import urllib3
from kubernetes.client.rest import ApiException

from ...spec import JobRecord
from .._jobfiles import JobFiles
from ..base import rank_prefixed
from .cluster import UNREACHABLE, Cluster, raw
from .status import ranks_of
from .tracker import owned_by

if TYPE_CHECKING:
    from .backend import KubernetesBackend

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

    def _pod(self, record: JobRecord, rank: int) -> dict[str, Any] | None:
        d = record.details
        pods = [
            p for p in self.cluster.pods(d["namespace"], record.name) if owned_by(p, d.get("uid"))
        ]
        view = ranks_of(pods).get(rank)
        return next((p for p in pods if p["metadata"]["name"] == view.pod), None) if view else None

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

    def lines(self, backend: KubernetesBackend, record: JobRecord, rank: int | None, follow: bool,
              tail: int | None, stop: threading.Event | None) -> Iterator[str]:  # fmt: skip
        """One rank, or every rank merged (each line prefixed with its rank)."""
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
