"""Cluster objects -> workbench status. Pure: dicts in (as the API returns them), values out.

A job's ranks come from its pods (the completion index of an Indexed Job's pod, the
replica type and index of a Kubeflow job's: Master/Chief 0 and Worker i -> i + 1 for a
PyTorchJob or TFJob, Worker i -> i for an MPIJob, whose launcher runs mpirun for every
rank: its log is rank 0's and, once it has ended, its result is every rank's); its
status from the workload's conditions, then from the pods while it has none.
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ...spec import JobStatus, RankState
from .manifests import INDEX_ANNOTATION
from .volcano import TASK_INDEX, is_volcano

REPLICA_TYPE = "training.kubeflow.org/replica-type"
REPLICA_INDEX = "training.kubeflow.org/replica-index"
# Why a job is Pending when the scheduler or a queue holds it (JobRecord.reason).
HOLD_REASONS = ("Unschedulable", "Queued")
VOLCANO_SUCCEEDED = ("Completed",)
VOLCANO_FAILED = ("Failed", "Terminated", "Aborted", "Terminating", "Aborting")
POD_STATES = {
    "Pending": RankState.PENDING,
    "Running": RankState.RUNNING,
    "Succeeded": RankState.SUCCEEDED,
    "Failed": RankState.FAILED,
}


@dataclass(frozen=True)
class RankView:
    """What one rank's pod says."""

    rank: int
    state: RankState
    pod: str
    node: str | None = None
    exit_code: int | None = None
    restarts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None  # the container's terminated/waiting reason
    log_pod: str | None = None  # where the rank's output is, when not its own pod (MPI)

    def columns(self) -> dict[str, Any]:
        """The rank row's columns (JobStore.set_rank)."""
        return {
            "state": self.state,
            "exit_code": self.exit_code,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }

    def details(self) -> dict[str, Any]:
        """The rank row's backend details."""
        return {"pod": self.pod, "node": self.node, "pod_restarts": self.restarts}


@dataclass(frozen=True)
class JobView:
    """What the workload and its pods say about the job."""

    status: JobStatus
    reason: str
    message: str = ""
    ranks: dict[int, RankView] = field(default_factory=dict)


def parse_time(text: str | None) -> float | None:
    """An RFC 3339 timestamp (``2026-12-01T15:18:10Z``) as epoch seconds."""
    if not text:
        return None
    try:
        return float(calendar.timegm(time.strptime(text[:19], "%Y-%m-%dT%H:%M:%S")))
    except ValueError:
        return None


def rank_of(pod: dict[str, Any]) -> int | None:
    """The workbench rank of a pod: its completion index, or Master 0 / Worker i+1."""
    meta = pod.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    index = annotations.get(INDEX_ANNOTATION, labels.get(INDEX_ANNOTATION))
    if index is None:  # a Volcano Job's pod: one task, its index is the rank
        index = annotations.get(TASK_INDEX, labels.get(TASK_INDEX))
    if index is not None:
        return int(index)
    kind = labels.get(REPLICA_TYPE)
    if kind is not None and labels.get(REPLICA_INDEX) is not None:
        if _owner_kind(pod) == "MPIJob":  # the launcher is no rank; workers hold them all
            return int(labels[REPLICA_INDEX]) if kind.lower() == "worker" else None
        return int(labels[REPLICA_INDEX]) + (0 if kind.lower() in ("master", "chief") else 1)
    return None


def _owner_kind(pod: dict[str, Any]) -> str | None:
    refs = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r.get("kind") for r in refs if r.get("controller")), None)


def is_mpi_launcher(pod: dict[str, Any]) -> bool:
    """True for the launcher pod of an MPIJob (runs mpirun; no rank of its own)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return _owner_kind(pod) == "MPIJob" and labels.get(REPLICA_TYPE, "").lower() == "launcher"


def rank_view(pod: dict[str, Any], rank: int | None = None) -> RankView | None:
    """A pod's rank, state, node, restarts and exit code (None for a pod without a rank)."""
    rank = rank_of(pod) if rank is None else rank
    if rank is None:
        return None
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    state = POD_STATES.get(status.get("phase", "Pending"), RankState.PENDING)
    main = ((spec.get("containers") or [{}])[0]).get("name")
    cstatus: dict[str, Any] = next(
        (c for c in status.get("containerStatuses") or [] if c.get("name") == main), {}
    )
    terminated = (cstatus.get("state") or {}).get("terminated") or {}
    waiting = (cstatus.get("state") or {}).get("waiting") or {}
    exit_code = terminated.get("exitCode")
    if state is RankState.FAILED and exit_code is None:
        # An init container failed (the master never resolved, a prefetch failed).
        for init in status.get("initContainerStatuses") or []:
            term = (init.get("state") or {}).get("terminated") or {}
            if term.get("exitCode"):
                exit_code, terminated = term["exitCode"], term
                break
    return RankView(
        rank=rank,
        state=state,
        pod=meta.get("name", ""),
        node=spec.get("nodeName"),
        exit_code=exit_code if state in (RankState.SUCCEEDED, RankState.FAILED) else None,
        restarts=int(cstatus.get("restartCount") or 0),
        started_at=parse_time(status.get("startTime")) if state is not RankState.PENDING else None,
        finished_at=parse_time(terminated.get("finishedAt"))
        if state in (RankState.SUCCEEDED, RankState.FAILED)
        else None,
        reason=terminated.get("reason") or waiting.get("reason"),
    )


def ranks_of(pods: Iterable[dict[str, Any]]) -> dict[int, RankView]:
    """Rank -> the view of its newest pod (a retried index has more than one)."""
    newest: dict[int, tuple[int, RankView]] = {}
    launcher: RankView | None = None
    for pod in pods:
        if is_mpi_launcher(pod):
            launcher = rank_view(pod, rank=0)
            continue
        view = rank_view(pod)
        if view is None:
            continue
        rv = int((pod.get("metadata") or {}).get("resourceVersion") or 0)
        created = (pod.get("metadata") or {}).get("creationTimestamp") or ""
        order = (parse_time(created) or 0) * 1e9 + rv
        if view.rank not in newest or order >= newest[view.rank][0]:
            newest[view.rank] = (int(order), view)
    ranks = {r: v for r, (_, v) in sorted(newest.items())}
    return ranks if launcher is None else _with_launcher(ranks, launcher)


def _with_launcher(ranks: dict[int, RankView], launcher: RankView) -> dict[int, RankView]:
    """An MPIJob's ranks with what its launcher says: mpirun's output (every rank's) is
    rank 0's log; mpirun exits 0 only when every rank did, so its success is each rank's
    (the workers, which only slept, are deleted after it); its failure is rank 0's."""
    out = dict(ranks)
    if 0 not in out:  # the workers are gone (cleaned after the launcher) or not made yet
        out[0] = launcher
    out[0] = replace(out[0], log_pod=launcher.pod)
    done = launcher.state in (RankState.SUCCEEDED, RankState.FAILED)
    for r, v in out.items():
        if launcher.state is RankState.SUCCEEDED or (done and r == 0):
            out[r] = replace(v, state=launcher.state, exit_code=launcher.exit_code,
                             finished_at=launcher.finished_at, reason=launcher.reason,
                             started_at=v.started_at or launcher.started_at)  # fmt: skip
    return dict(sorted(out.items()))


def conditions(workload: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """The workload's True conditions by type."""
    out = {}
    for c in ((workload or {}).get("status") or {}).get("conditions") or []:
        if str(c.get("status", "True")) == "True":
            out[c.get("type", "")] = c
    return out


def job_view(workload: dict[str, Any] | None, pods: Iterable[dict[str, Any]],
             podgroup: dict[str, Any] | None = None) -> JobView:  # fmt: skip
    """The job's status from its workload's conditions (a Volcano Job's phase, and its
    PodGroup while the gang waits), then its pods."""
    ranks = ranks_of(pods)
    if is_volcano(workload):
        return _volcano_view(workload or {}, podgroup, ranks)
    conds = conditions(workload)
    failed = [v for v in ranks.values() if v.state is RankState.FAILED]
    if ("Complete" in conds or "Succeeded" in conds) and failed:
        # A PyTorchJob succeeds with its Master even when a Worker failed first; a gang
        # with a failed rank failed, as a local job does.
        return JobView(JobStatus.FAILED, "RankFailed", failure_message(failed), ranks)
    if "Complete" in conds or "Succeeded" in conds:
        return JobView(JobStatus.SUCCEEDED, "Succeeded", "all ranks finished", ranks)
    if "Failed" in conds:
        cond = conds["Failed"]
        message = failure_message(failed) or cond.get("message") or "the workload failed"
        return JobView(JobStatus.FAILED, cond.get("reason") or "Failed", message, ranks)
    if any(v.state is RankState.RUNNING for v in ranks.values()):
        return JobView(JobStatus.RUNNING, "Started", "", ranks)
    return JobView(JobStatus.PENDING, "Submitted", "", ranks)


def failure_message(failed: list[RankView]) -> str:
    """``rank R exited with code C`` for the first failed rank (the local backend's words)."""
    for v in sorted(failed, key=lambda v: (v.finished_at or 0, v.rank)):
        if v.exit_code is not None:
            return f"rank {v.rank} exited with code {v.exit_code}"
        return f"rank {v.rank} failed ({v.reason or 'no exit code'})"
    return ""


def _volcano_view(job: dict[str, Any], podgroup: dict[str, Any] | None,
                  ranks: dict[int, RankView]) -> JobView:  # fmt: skip
    """A Volcano Job: state.phase says how it ended; the PodGroup why it has not started."""
    phase = ((job.get("status") or {}).get("state") or {}).get("phase") or "Pending"
    failed = [v for v in ranks.values() if v.state is RankState.FAILED]
    if phase in VOLCANO_SUCCEEDED and not failed:
        return JobView(JobStatus.SUCCEEDED, "Succeeded", "all ranks finished", ranks)
    if phase in VOLCANO_SUCCEEDED or phase in VOLCANO_FAILED:
        if phase in ("Terminating", "Aborting") and not failed:
            return JobView(JobStatus.RUNNING, "Started", "", ranks)  # stopping for another cause
        return JobView(
            JobStatus.FAILED, phase, failure_message(failed) or f"the Volcano Job is {phase}", ranks
        )
    if any(v.state is RankState.RUNNING for v in ranks.values()):
        return JobView(JobStatus.RUNNING, "Started", "", ranks)
    pg_status = (podgroup or {}).get("status") or {}
    if not ranks and pg_status.get("phase", "Pending") == "Pending":
        held = conditions(podgroup).get("Unschedulable")
        if held is not None:
            return JobView(JobStatus.PENDING, "Unschedulable", held.get("message") or "", ranks)
        if podgroup is not None:
            queue = (podgroup.get("spec") or {}).get("queue") or "default"
            return JobView(JobStatus.PENDING, "Queued", f"waiting in Volcano queue {queue}", ranks)
    return JobView(JobStatus.PENDING, "Submitted", "", ranks)
