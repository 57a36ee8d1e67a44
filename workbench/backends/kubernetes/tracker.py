"""What the cluster says about a job, written into the store.

``JobSync.sync`` turns a job's workload and pods into the store's job, rank and event
rows (only what changed, so the change feed carries each change once). It also carries
out gang retries: a failed attempt with retries left is deleted in the foreground and
created again with the next WORKBENCH_ATTEMPT once it is gone, as the local supervisor
restarts a gang. ``NamespaceTracker`` keeps one watch per namespace and resource (pods,
Jobs, PyTorchJobs, TFJobs, MPIJobs, Events) and calls ``sync`` from the watch threads.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...spec import JobEvent, JobStatus, RankState, TrainSpec
from ...store import JobStore
from .._jobfiles import JobFiles
from . import watch
from .cluster import BACKEND, KUBEFLOW, UNREACHABLE, VOLCANO, ApiException, Cluster
from .kubeflow import PLURALS, replica_templates
from .manifests import LABEL_JOB
from .status import HOLD_REASONS, JobView, RankView, job_view
from .volcano import PODGROUPS

log = logging.getLogger(__name__)
WORKLOAD_FILE = "workload.json"
UNCLAIMED_PER_JOB = 20  # Warning Events held for a job whose row is not visible yet
UNCLAIMED_JOBS = 256
# The copier of lane k8sl also copies when a job ends (its reader then prefers the copies);
# the minimal reader in podlogs.py reads finished pods directly.
_COPY_AT_END = (
    importlib.util.find_spec(__package__ + ".logcopy") is not None
)  # the workload as first created: a retry creates it again


# (connect, read) seconds for the pod list a cancel makes to copy the logs first: a slow
# cluster delays the cancel by at most this much (the copy itself reads with a timeout).
CANCEL_READ = (5.0, 20.0)


def owned_by(obj: dict[str, Any], uid: str | None) -> bool:
    """True when ``obj`` belongs to the workload ``uid`` (or no uid is known yet)."""
    if not uid:
        return True
    return any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


class JobSync:
    """Writes job state into the store; one per backend, calls serialised."""

    def __init__(self, store: JobStore, cluster: Cluster,
                 save_logs: Callable[[str, str, dict[int, str], int], list[JobEvent] | None],
                 ) -> None:  # fmt: skip
        self.store = store
        self.cluster = cluster
        # (namespace, job_dir, {rank: pod}, attempt): copy an attempt's logs into the folder;
        # returns the GPU alerts the pods' agents wrote, as events
        self.save_logs = save_logs
        self.lock = threading.RLock()
        # Warning Events about a job whose launch is under way (its row absent or marked
        # "launching"): the scheduler can speak, and the events watch deliver, before
        # launch is done. Kept here until claim_events(job).
        self._unclaimed: dict[str, list[dict[str, Any]]] = {}

    def sync(self, name: str, workload: dict[str, Any] | None, pods: list[dict[str, Any]],
             gone: bool, fresh: bool = False, podgroup: dict[str, Any] | None = None) -> None:  # fmt: skip
        """Bring job ``name``'s rows up to date with ``workload`` (None: unknown, or gone
        when ``gone``) and its pods (``fresh``: just listed, not from a watch's cache), and
        a Volcano job's PodGroup (why a gang waits)."""
        with self.lock:
            row = self.store.row(name)
            if row is None or row["backend"] != BACKEND or JobStatus(row["status"]).terminal:
                return
            if row["details"].get("launching"):
                return  # launch syncs once its objects exist (an older job's may go first)
            details = row["details"]
            uid = details.get("uid")
            if workload is not None and uid and workload["metadata"].get("uid") != uid:
                workload, gone = None, False  # an earlier attempt's object, on its way out
            pods = [p for p in pods if owned_by(p, uid)]
            if podgroup is not None and not owned_by(podgroup, uid):
                podgroup = None  # an earlier attempt's
            if details.get("restarting"):
                if gone:
                    self._recreate(name, row)
                return
            view = job_view(workload, pods, podgroup)
            if view.status.terminal and not fresh:
                # The workload's watch may run ahead of the pods' (separate streams): the
                # end is settled on the pods as they are now (one list per job end).
                pods = [
                    p for p in self.cluster.pods(details["namespace"], name) if owned_by(p, uid)
                ]
                view = job_view(workload, pods, podgroup)
            self._write_ranks(name, view)
            now = time.time()
            if row["cancel_requested"]:
                if gone:
                    msg = "cancelled by user"
                    self.store.finish_if_active(name, JobStatus.CANCELLED, msg,
                                                JobEvent(now, "Cancelled", msg), RankState.STOPPED)  # fmt: skip
                return
            if gone:
                msg = "the workload was deleted outside workbench"
                self.store.finish_if_active(name, JobStatus.FAILED, msg,
                                            JobEvent(now, "WorkloadDeleted", msg, "error"),
                                            RankState.STOPPED)  # fmt: skip
                return
            if workload is None:
                return  # the workload's watch has not caught up: status waits for it
            if view.status is JobStatus.PENDING and view.reason in HOLD_REASONS:
                self._hold(name, row, view)
                return
            started = [v.started_at for v in view.ranks.values() if v.started_at is not None]
            if row["status"] == JobStatus.PENDING.value and (
                view.status is JobStatus.RUNNING or (view.status.terminal and started)
            ):
                start = min(now, max(row["created_at"], min(started, default=now)))
                running = [v for v in view.ranks.values() if v.state is not RankState.PENDING]
                nodes = sorted({v.node for v in running if v.node})
                where = f" on {', '.join(nodes)}" if nodes else ""
                self.store.update(
                    name, status=JobStatus.RUNNING, started_at=row["started_at"] or start, message="",
                    event=JobEvent(now, "Started", f"{len(running)} of {row_workers(row)} "
                                   f"rank(s) started{where}"),
                )  # fmt: skip
            if not view.status.terminal:
                return
            live = [
                v for v in view.ranks.values() if v.state in (RankState.PENDING, RankState.RUNNING)
            ]
            if view.status is JobStatus.SUCCEEDED and live:
                return  # a PyTorchJob succeeds with its Master: the job ends with its last rank
            if view.status is JobStatus.FAILED and live:  # the gang stops as one
                for v in live:
                    self.cluster.delete_quietly(details["namespace"], "Pod", v.pod)
            retries = int(json.loads(row["spec_json"]).get("max_retries") or 0)
            if view.status is JobStatus.FAILED and int(row["attempt"]) <= retries:
                self._restart(name, row, view)
                return
            stored = {r["rank"] for r in self.store.rank_rows(name)}
            for rank in set(range(row_workers(row))) - stored - set(view.ranks):
                # A rank whose pod the gang's controller deleted (Volcano's TerminateJob,
                # the operator on a failure) before the watch saw it: stopped, not lost.
                self.store.set_rank(name, rank, state=RankState.PENDING)
            level = "info" if view.status is JobStatus.SUCCEEDED else "error"
            if _COPY_AT_END and details.get("job_dir"):  # logs outlive pod garbage collection
                self._save_logs(row, view)
            # A succeeded job's ranks whose pods the controller removed before the watch saw
            # them end (an MPIJob's workers once its launcher is done) succeeded with it.
            rest = RankState.SUCCEEDED if view.status is JobStatus.SUCCEEDED else RankState.STOPPED
            self.store.finish_if_active(name, view.status, view.message,
                                        JobEvent(now, view.status.value, view.message, level),
                                        rest)  # fmt: skip

    def _add_alerts(self, name: str, alerts: list[JobEvent]) -> None:
        """The pods' GPU alerts as job events, each once: a copy redone after one cut
        short (or a retried sync) reads the same records again."""
        if not alerts:
            return
        have = {(e.time, e.reason, e.message) for _, e in self.store.events_since(name)}
        for event in alerts:
            if (event.time, event.reason, event.message) not in have:
                have.add((event.time, event.reason, event.message))
                self.store.add_event(name, event)

    def _hold(self, name: str, row: dict[str, Any], view: JobView) -> None:
        """A gang the scheduler holds (Unschedulable) or a queue keeps (Queued): the
        reason as an event (once per change) and the scheduler's text as the message."""
        events = [e for _, e in self.store.events_since(name)]
        last = next((e for e in reversed(events) if e.reason in (*HOLD_REASONS, "Started")), None)
        if last is not None and (last.reason, last.message) == (view.reason, view.message):
            return
        level = "warning" if view.reason == "Unschedulable" else "info"
        self.store.update(name, message=view.message,
                          event=JobEvent(time.time(), view.reason, view.message, level))  # fmt: skip

    def _write_ranks(self, name: str, view: JobView) -> None:
        stored = {r["rank"]: r for r in self.store.rank_rows(name)}
        for rank, v in view.ranks.items():
            old = stored.get(rank)
            if old is not None and _same(old, v):
                continue
            self.store.set_rank(name, rank, details=v.details(), **v.columns())
            if v.state is RankState.FAILED and (old is None or old["state"] != "Failed"):
                what = (f"exited with code {v.exit_code}" if v.exit_code is not None
                        else f"failed ({v.reason or 'no exit code'})")  # fmt: skip
                self.store.add_event(name, JobEvent(time.time(), "RankFailed",
                                                    f"rank {rank} {what}", "error"))  # fmt: skip

    def pods_to_copy(self, name: str) -> dict[int, str]:
        """Rank -> pod of the job's current attempt, listed now (for a cancel's copy of the
        logs: its pods go with the workload); {} when the cluster does not answer in time."""
        row = self.store.row(name)
        if row is None:
            return {}
        details = row["details"]
        try:
            pods = self.cluster.pods(details["namespace"], name, timeout=CANCEL_READ)
        except (ApiException, *UNREACHABLE):
            return {}
        view = job_view(None, [p for p in pods if owned_by(p, details.get("uid"))])
        return {r: v.log_pod or v.pod for r, v in view.ranks.items() if v.log_pod or v.pod}

    def kept_copies(self, name: str, alerts: list[JobEvent]) -> None:
        """A cancel kept its copy of the logs: the folder's spec.yaml, the copy's alerts."""
        row = self.store.row(name)
        if row is None:
            return
        with contextlib.suppress(Exception):  # spec.yaml is for people: the row has it
            JobFiles(Path(row["details"]["job_dir"])).ensure(
                TrainSpec.from_dict(json.loads(row["spec_json"]))
            )
        self._add_alerts(name, alerts)

    def _save_logs(self, row: dict[str, Any], view: JobView) -> None:
        """Copy the attempt's pod logs into the job's folder (made now, with spec.yaml,
        if launch did not need it) and record the GPU alerts its agents wrote."""
        details = row["details"]
        with contextlib.suppress(Exception):  # spec.yaml is for people: the row has it
            JobFiles(Path(details["job_dir"])).ensure(
                TrainSpec.from_dict(json.loads(row["spec_json"]))
            )
        with contextlib.suppress(Exception):
            alerts = self.save_logs(
                details["namespace"],
                details["job_dir"],
                {r: v.log_pod or v.pod for r, v in view.ranks.items()},
                int(row["attempt"]),
            )
            self._add_alerts(row["name"], alerts or [])

    def _restart(self, name: str, row: dict[str, Any], view: JobView) -> None:
        details, ns = row["details"], row["details"]["namespace"]
        attempt = int(row["attempt"])
        retries = int(json.loads(row["spec_json"]).get("max_retries") or 0)
        self._save_logs(row, view)  # the attempt's logs outlive its pods
        # The Secret and Service belong to the workload: free them so they outlive it.
        for kind, obj in (("Service", details.get("service")), ("Secret", details.get("secret"))):
            if obj:
                with contextlib.suppress(Exception):
                    self.cluster.disown(ns, kind, obj)
        self.store.update(
            name, status=JobStatus.PENDING, attempt=attempt + 1, details={"restarting": True},
            event=JobEvent(time.time(), "Restarting",
                           f"{view.message}; attempt {attempt + 1} of {retries + 1} starts "
                           "once the failed one is gone", "warning"),
        )  # fmt: skip
        for rank in view.ranks:
            self.store.set_rank(name, rank, state=RankState.PENDING, exit_code=None,
                                started_at=None, finished_at=None)  # fmt: skip
        try:
            self.cluster.delete_workload(ns, details["kind"], name)
        except Exception as e:  # recorded, and the job ends
            self._give_up(name, f"could not delete the failed attempt: {e}")

    def _recreate(self, name: str, row: dict[str, Any]) -> None:
        details = row["details"]
        ns, attempt = details["namespace"], int(row["attempt"])
        try:
            body = json.loads((Path(details["job_dir"]) / WORKLOAD_FILE).read_text())
            set_attempt(body, attempt)
            created = self.cluster.create(ns, body)
            for kind, obj in (
                ("Service", details.get("service")),
                ("Secret", details.get("secret")),
            ):
                if obj:
                    self.cluster.own(ns, kind, obj, created)
        except Exception as e:  # recorded, and the job ends
            self._give_up(name, f"could not start attempt {attempt}: {e}")
            return
        self.store.update(name, details={"uid": created["metadata"]["uid"], "restarting": None})

    def _give_up(self, name: str, msg: str) -> None:
        self.store.update(name, details={"restarting": None})
        self.store.finish_if_active(name, JobStatus.FAILED, msg,
                                    JobEvent(time.time(), "RestartFailed", msg, "error"),
                                    RankState.STOPPED)  # fmt: skip

    def add_cluster_event(self, name: str, event: dict[str, Any]) -> None:
        """A Kubernetes Warning Event about one of the job's objects, as a job event (once)."""
        reason, message = event.get("reason") or "Warning", event.get("message") or ""
        if reason == "PodGroupPending":
            return  # Volcano's restatement of the PodGroup's condition: sync() writes that
        with self.lock:
            row = self.store.row(name)
            if row is None or row["details"].get("launching"):  # claim_events adds it
                held = self._unclaimed.setdefault(name, [])
                if len(held) < UNCLAIMED_PER_JOB:
                    held.append(event)
                while len(self._unclaimed) > UNCLAIMED_JOBS:  # launches that rolled back
                    del self._unclaimed[next(iter(self._unclaimed))]
                return
            if row["backend"] != BACKEND:
                return
            if any((e.reason, e.message) == (reason, message)
                   for _, e in self.store.events_since(name)):  # fmt: skip
                return  # the same event again (a count bump, a re-list)
            self.store.add_event(name, JobEvent(time.time(), reason, message, "warning"))

    def claim_events(self, name: str) -> None:
        """Record the Warning Events that arrived for ``name`` while it launched (launch
        calls it once done; the lock orders it against the watch)."""
        with self.lock:
            for event in self._unclaimed.pop(name, []):
                self.add_cluster_event(name, event)


def row_workers(row: dict[str, Any]) -> int:
    """Workers of a stored job."""
    return int(json.loads(row["spec_json"]).get("workers") or 1)


def set_attempt(workload: dict[str, Any], attempt: int) -> None:
    """Give every container of ``workload`` WORKBENCH_ATTEMPT=attempt (a fresh object to
    create: server-set metadata dropped)."""
    meta = workload["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp", "finalizers",
                "generation", "managedFields"):  # fmt: skip
        meta.pop(key, None)
    workload.pop("status", None)
    spec = workload.get("spec") or {}
    if "template" in spec:
        templates = [spec["template"]]
    else:  # Kubeflow replicas, or a Volcano Job's tasks
        templates = replica_templates(workload) + [
            t["template"] for t in spec.get("tasks") or [] if "template" in t
        ]
    for tmpl in templates:
        pod = tmpl.get("spec") or {}
        for c in [*pod.get("initContainers", []), *pod.get("containers", [])]:
            for e in c.get("env") or []:
                if e.get("name") == "WORKBENCH_ATTEMPT":
                    e["value"] = str(attempt)


def _same(old: dict[str, Any], v: RankView) -> bool:
    det = old.get("details") or {}
    return (
        old["state"] == v.state.value
        and old["exit_code"] == v.exit_code
        and old["started_at"] == v.started_at
        and old["finished_at"] == v.finished_at
        and det.get("pod") == v.pod
        and det.get("node") == v.node
        and det.get("pod_restarts", 0) == v.restarts
    )


class NamespaceTracker:
    """The watches of one namespace (pods, Jobs, Kubeflow jobs where served, Events) and
    the objects they have seen, by job."""

    def __init__(self, cluster: Cluster, namespace: str, sync: JobSync,
                 **watch_options: Any) -> None:  # fmt: skip
        self.cluster, self.namespace, self.syncer = cluster, namespace, sync
        self.watch_options = watch_options  # NamespaceWatch keywords (timeouts, backoff)
        self.lock = threading.Lock()
        self.pods: dict[str, dict[str, dict[str, Any]]] = {}  # job -> pod name -> pod
        self.workloads: dict[str, dict[str, Any]] = {}  # job -> Job, Kubeflow job or Volcano Job
        self.podgroups: dict[str, dict[str, Any]] = {}  # job -> its Volcano PodGroup
        self.pod_jobs: dict[str, str] = {}  # pod name -> job
        self.watches: list[watch.NamespaceWatch] = []

    def start(self) -> NamespaceTracker:
        """Start the watches (daemon threads)."""
        api, ns, opts = self.cluster.api, self.namespace, self.watch_options
        self.watches = [
            watch.jobs(api, ns, self._on_workload, LABEL_JOB, **opts),
            watch.pods(api, ns, self._on_pod, LABEL_JOB, **opts),
            watch.events(api, ns, self._on_event, _event_status, **opts),
        ]
        with contextlib.suppress(Exception):
            if self.cluster.serves(*KUBEFLOW[:2]):
                for plural in PLURALS.values():
                    self.watches.append(watch.custom(api, *KUBEFLOW[:2], plural, ns,
                                                     self._on_workload, LABEL_JOB, **opts))  # fmt: skip
        with contextlib.suppress(Exception):
            if self.cluster.serves(*VOLCANO[:2]):
                self.watches.append(watch.custom(api, *VOLCANO[:2], VOLCANO[2], ns,
                                                 self._on_workload, LABEL_JOB, **opts))  # fmt: skip
                # PodGroups carry their Job's labels (the controller copies them).
                self.watches.append(watch.custom(api, *PODGROUPS[:2], PODGROUPS[2], ns,
                                                 self._on_podgroup, LABEL_JOB, **opts))  # fmt: skip
        for w in self.watches:
            w.start()
        return self

    @property
    def alive(self) -> bool:
        """True while every watch thread runs."""
        return bool(self.watches) and all(
            w._thread is not None and w._thread.is_alive() for w in self.watches
        )

    def stop(self) -> None:
        """Stop every watch."""
        for w in self.watches:
            w.stop(timeout=2)

    def wait_synced(self, timeout: float) -> bool:
        """True once every watch has listed."""
        deadline = time.monotonic() + timeout
        return all(w.wait_synced(max(0.0, deadline - time.monotonic())) for w in self.watches)

    def _on_workload(self, ev: watch.WatchEvent) -> None:
        job = (ev.object.get("metadata", {}).get("labels") or {}).get(LABEL_JOB) or ev.name
        with self.lock:
            if ev.type == "DELETED":
                current = self.workloads.get(job)
                if current is not None and current["metadata"].get("uid") == ev.uid:
                    del self.workloads[job]
            else:
                self.workloads[job] = ev.object
        self._sync(job, gone=ev.type == "DELETED")

    def _on_podgroup(self, ev: watch.WatchEvent) -> None:
        job = (ev.object.get("metadata", {}).get("labels") or {}).get(LABEL_JOB)
        if job is None:
            return
        with self.lock:
            if ev.type == "DELETED":
                self.podgroups.pop(job, None)
            else:
                self.podgroups[job] = ev.object
        self._sync(job, gone=False)

    def _on_pod(self, ev: watch.WatchEvent) -> None:
        job = (ev.object.get("metadata", {}).get("labels") or {}).get(LABEL_JOB)
        with self.lock:
            job = job or self.pod_jobs.get(ev.name)
            if job is None:
                return
            if ev.type == "DELETED":
                self.pods.get(job, {}).pop(ev.name, None)
                self.pod_jobs.pop(ev.name, None)
            else:
                self.pods.setdefault(job, {})[ev.name] = ev.object
                self.pod_jobs[ev.name] = job
        self._sync(job, gone=False)

    def _sync(self, job: str, gone: bool) -> None:
        # The snapshot is taken under the syncer's lock: each watch thread (and launch)
        # syncs, and a snapshot taken before another thread's newer one, written after
        # it, would leave the row at the older state until the next change (a gang held
        # Unschedulable read back as Queued). So the last write is of the newest view.
        with self.syncer.lock:
            with self.lock:
                workload = self.workloads.get(job)
                pods = list(self.pods.get(job, {}).values())
                podgroup = self.podgroups.get(job)
            try:
                self.syncer.sync(job, workload, pods, gone=gone and workload is None,
                                 podgroup=podgroup)  # fmt: skip
            except UNREACHABLE as e:
                log.info("kubernetes: could not update %s (%s)", job, e)

    def _on_event(self, ev: watch.WatchEvent) -> None:
        obj = ev.object
        if ev.type == "DELETED" or obj.get("type") != "Warning":
            return
        involved = obj.get("involvedObject") or {}
        name = involved.get("name") or ""
        with self.lock:
            job = name if name in self.workloads else self.pod_jobs.get(name)
        if job is None and involved.get("kind") == "Pod":
            with contextlib.suppress(Exception):
                pod = self.cluster.pod(self.namespace, name)
                job = (pod["metadata"].get("labels") or {}).get(LABEL_JOB)
        if job is not None:
            self.syncer.add_cluster_event(job, obj)


def _event_status(obj: dict[str, Any]) -> Any:
    return obj.get("count"), obj.get("message"), obj.get("type")
