"""KubernetesBackend: TrainSpecs as Indexed Jobs or Kubeflow jobs (PyTorchJob, TFJob, MPIJob)
on a cluster.

admit renders the manifests (manifests.py) and checks the gang against the nodes when a
cluster is configured; launch makes sure of the namespace's shared Service, creates the
Secret and the workload, and the store row. One watch per namespace and resource
(tracker.py) writes every status change into the store, so the change feed carries
cluster jobs as it carries local ones.
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ...catalog import Catalog, load_catalog
from ...errors import BackendUnavailableError, JobNotFoundError, SpecError, SubmitError
from ...plan import Placement, Plan
from ...settings import Settings, make_private_dir
from ...spec import JobEvent, JobRecord, JobStatus, TrainSpec
from ...store import JobStore
from .._jobfiles import JobFiles
from ..base import Backend, Capabilities, NodeInfo, new_job_name
from . import capacity
from .cluster import (
    BACKEND,
    KUBEFLOW,
    UNREACHABLE,
    VOLCANO,
    ApiException,
    Cluster,
    api_error,
    workload_kind,
)
from .config import DNS1123_LABEL, KubeSettings, check_flavor, check_namespace, load_settings
from .manifests import (
    FLAVORS,
    RANKS_SERVICE,
    ClusterOptions,
    RenderedJob,
    render,
    secret_name,
)
from .podlogs import PodLogs
from .tracker import WORKLOAD_FILE, JobSync, NamespaceTracker
from .volcano import KIND_KEY as VOLCANO_KIND

log = logging.getLogger(__name__)

SPEC_HASH = "workbench.io/spec-hash"
# Which workbench home made an object (a hash of host name and home path): a launch killed
# between its creates leaves objects and a row still marked "launching"; the same spec
# submitted again from the same home adopts them instead of refusing its own job.
ORIGIN = "workbench.io/origin"
MAX_NAME = 52  # pods are named NAME-INDEX-xxxxx, and a label value holds at most 63
SETTLE = 10.0  # seconds a follower waits after the last pod's log for the job's end
# Seconds a cancel spends reading the pods' logs before its delete (their copy is the
# only one left once the pods go); a log not read by then is kept up to there, marked.
CANCEL_COPY_SECONDS = 15.0
DATA_SCHEMES = ("pvc", "nas", "s3", "s3a", "oss")
# A launch marks its row until its objects exist; past this age the mark is a dead
# launch's, whatever its process (each request a launch makes times out well before).
LAUNCH_BOUND = 300.0


def _launcher() -> dict[str, Any]:
    """Who launches, for _launch_dead: this host, this process, now."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "at": time.time()}


def _launch_dead(details: dict[str, Any]) -> bool:
    """Whether the launch that marked a row is over without having cleared its mark: its
    process is gone from this host, or the mark is older than any launch takes."""
    who = details.get("launcher") or {}
    try:
        if time.time() - float(who["at"]) > LAUNCH_BOUND:
            return True
        if who["host"] != socket.gethostname():
            return False  # another machine's launch: only its age tells
        os.kill(int(who["pid"]), 0)
    except ProcessLookupError:
        return True
    except (KeyError, TypeError, ValueError, PermissionError):
        return False  # an unreadable mark waits out its age; a live process of another user
    return False


class KubernetesBackend(Backend):
    """Runs each job as a Kubernetes workload, one pod per worker."""

    name = BACKEND
    options = {
        "namespace": "the namespace to run in (default: kubernetes.namespace in the config)",
        "flavor": "indexed (a batch/v1 Indexed Job, any cluster) | kubeflow (a PyTorchJob, "
        "TFJob or MPIJob by the framework) | "
        "volcano (a gang-scheduled Volcano Job)",
        "context": "the kubeconfig context to use",
    }

    def __init__(self, settings: Settings | None = None, catalog: Catalog | None = None,
                 store: JobStore | None = None) -> None:  # fmt: skip
        self.settings = settings or Settings.load()
        self.catalog = catalog or load_catalog(self.settings.catalog_file)
        self.home = Path(self.settings.home)
        make_private_dir(self.home)
        (self.home / "jobs").mkdir(exist_ok=True, mode=0o700)
        self.store = store if store is not None else JobStore(self.home / "jobs.db")
        self.kube: KubeSettings = load_settings(self.settings.kubernetes)
        self._lock = threading.Lock()
        # One client (and its log reader and store writer) per kubeconfig context in use.
        self._contexts: dict[str | None, tuple[Cluster, PodLogs, JobSync]] = {}
        self.cluster, self._pod_logs, self.sync = self._context(None)
        self._trackers: dict[tuple[str | None, str], NamespaceTracker] = {}
        where = f"{socket.gethostname()}\0{self.home.resolve()}"
        self.origin = hashlib.sha256(where.encode()).hexdigest()[:16]

    def _context(self, context: str | None) -> tuple[Cluster, PodLogs, JobSync]:
        """The client, log reader and store writer for ``context`` (None: the configured)."""
        key = None if context in (None, self.kube.context) else context
        with self._lock:
            if key not in self._contexts:
                cluster = Cluster(self.kube, key)
                logs = PodLogs(cluster)
                self._contexts[key] = (cluster, logs, JobSync(self.store, cluster, logs.save))
            return self._contexts[key]

    def _of(self, record: JobRecord) -> tuple[Cluster, PodLogs, JobSync]:
        """The client, log reader and store writer of the context ``record`` runs in."""
        return self._context(record.details.get("context"))

    # ---- admit / launch -------------------------------------------------------------------
    def validate_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """namespace (a DNS-1123 label), flavor (indexed | kubeflow), context (text)."""
        options = super().validate_options(options)
        if "namespace" in options:
            check_namespace(options["namespace"], "backend_options.namespace")
        if "flavor" in options:
            check_flavor(options["flavor"], "backend_options.flavor")
        if "context" in options and not isinstance(options["context"], str):
            raise SpecError("backend_options.context", "must be a kubeconfig context name")
        return options

    def admit(self, spec: TrainSpec) -> Plan:
        """Render the manifests and check the gang against the cluster's nodes (when a
        cluster is configured); creates nothing, contacts nothing without a kubeconfig."""
        spec.validate(self.catalog)
        options = self.validate_options(spec.backend_options)
        if spec.runtime not in ("auto", "pod"):
            raise SpecError("runtime", f"{spec.runtime} is a local runtime",
                            "the kubernetes backend runs pods: use --runtime pod or leave it out")  # fmt: skip
        cluster = self._context(options.get("context"))[0]
        if options.get("context") and cluster.configured:
            try:
                cluster.api  # noqa: B018 - loads the kubeconfig's context, contacts nothing
            except BackendUnavailableError as e:
                raise SpecError("backend_options.context", e.detail,
                                "use a context of your kubeconfig (kubectl config get-contexts)") from None  # fmt: skip
        name = spec.name or self._new_name(spec)
        if len(name) > MAX_NAME or not DNS1123_LABEL.match(name):
            raise SpecError("name", f"{name!r} cannot name a cluster job",
                            f"use at most {MAX_NAME} lowercase letters, digits and '-'")  # fmt: skip
        spec.name = name
        warnings: list[str] = []
        reachable = cluster.configured
        if not reachable:
            warnings.append("no kubeconfig: nothing was checked against a cluster "
                            "(set KUBECONFIG to check capacity and flavours)")  # fmt: skip
        flavor = options.get("flavor") or self.kube.flavor
        if reachable and (flavor in ("auto", "kubeflow")):
            try:
                served = cluster.serves(*KUBEFLOW[:2])
            except UNREACHABLE as e:
                warnings.append(f"the cluster did not answer ({type(e).__name__}): "
                                "nothing was checked against it")  # fmt: skip
                reachable, served = False, flavor == "kubeflow"
            if flavor == "kubeflow" and not served:
                raise SpecError("backend_options.flavor", "the cluster does not serve "
                                "kubeflow.org/v1 (PyTorchJob, TFJob, MPIJob)", "use flavor "
                                "indexed, or install the Kubeflow training-operator")  # fmt: skip
            flavor = "kubeflow" if served else "indexed"
        elif flavor == "auto":
            flavor = "indexed"
        elif flavor == "volcano" and reachable:
            try:
                if not cluster.serves(*VOLCANO[:2]):
                    raise SpecError("backend_options.flavor", "the cluster does not serve "
                                    "batch.volcano.sh/v1alpha1 Jobs", "use flavor indexed or "
                                    "kubeflow, or install Volcano")  # fmt: skip
            except UNREACHABLE as e:
                warnings.append(f"the cluster did not answer ({type(e).__name__}): "
                                "nothing was checked against it")  # fmt: skip
                reachable = False
        offer = self.catalog.spec(spec.instance_spec or "")
        image = spec.image_ref(self.catalog)
        namespace = options.get("namespace") or self.kube.namespace
        place = self.kube.instance_specs.get(offer.name)
        cluster_options = ClusterOptions(
            namespace=namespace,
            service_account=self.kube.service_account,
            image_pull_secrets=self.kube.image_pull_secrets,
            node_selector=dict(place.node_selector) if place else {},
            tolerations=tuple(place.tolerations) if place else (),
            priority_class=place.priority_class if place else None,
            wait_image=self.kube.wait_image,
            master_wait_seconds=self.kube.master_wait_seconds,
            master_port=self.kube.master_port,
            ttl_seconds_after_finished=self.kube.ttl_seconds_after_finished,
            queue=self.kube.volcano_queue,
            scheduler_name=self.kube.scheduler_name,
            gpu_sharing=self.kube.gpu_sharing,
            csi_drivers=self.kube.csi_drivers,
        )
        rendered = render(spec, offer, image, cluster_options, flavor)
        workload = rendered.manifests[-1]
        # Retries restart the whole gang (the backend does it, as the local supervisor does):
        # the workload itself never retries one pod of a gang.
        if flavor == "indexed":
            workload["spec"]["backoffLimit"] = 0
        elif flavor == "volcano":
            workload["spec"]["maxRetry"] = 0
        else:
            workload["spec"]["runPolicy"]["backoffLimit"] = 0
        digest = hashlib.sha256(
            json.dumps(
                [
                    rendered.manifests,
                    sorted(rendered.secret["stringData"]) if rendered.secret else [],
                ],
                sort_keys=True,
            ).encode()
        ).hexdigest()[:16]
        workload["metadata"].setdefault("annotations", {})[SPEC_HASH] = digest
        if reachable:
            try:
                nodes, pods = cluster.capacity_snapshot()
                capacity.check_gang(nodes, spec, cluster_options.node_selector, warnings,
                                    workload=workload, pods=pods)  # fmt: skip
            except UNREACHABLE as e:
                warnings.append(f"the cluster did not answer ({type(e).__name__}): "
                                "capacity was not checked")  # fmt: skip
        return Plan(
            backend=self.name,
            name=name,
            spec=spec,
            runtime="pod",
            image=image,
            price_per_hour=offer.price_per_hour,
            placement=[Placement(rank=i) for i in range(spec.workers)],
            warnings=warnings,
            manifests=rendered.display_manifests(),  # the Secret's values masked
            backend_state={
                "rendered": rendered,
                "flavor": flavor,
                "hash": digest,
                "context": options.get("context"),
            },
        )

    def _new_name(self, spec: TrainSpec) -> str:
        return new_job_name(spec.command, self.store.exists)

    def launch(self, plan: Plan) -> JobRecord:
        """Create the Secret, the workload and the Service, and record the job Pending.
        The same name with the same spec returns the job that exists; another spec is a
        SpecError on ``name``."""
        if plan.backend != self.name:
            raise SubmitError(self.name, f"the plan is for backend {plan.backend!r}")
        rendered: RenderedJob = plan.backend_state["rendered"]
        flavor, digest = plan.backend_state["flavor"], plan.backend_state["hash"]
        context = plan.backend_state.get("context")
        if context == self.kube.context:
            context = None
        cluster = self._context(context)[0]
        ns, name, kind = rendered.namespace, rendered.name, workload_kind(rendered.manifests[-1])
        existing = self._existing(name, digest)
        if existing is not None:
            return existing
        spec = plan.spec
        redacted = spec.redacted()  # once: the row and spec.yaml hold the same
        files = JobFiles(self.home / "jobs" / name)
        secret = secret_name(name) if rendered.secret else None
        record = JobRecord(
            name=name, status=JobStatus.PENDING, backend=self.name, spec=redacted.to_dict(),
            image=plan.image, runtime="pod", price_per_hour=plan.price_per_hour,
            job_dir=str(files.dir),
            details={"runtime": "pod", "namespace": ns, "kind": kind, "flavor": flavor,
                     "spec_hash": digest, "service": None, "secret": secret, "context": context,
                     **_scheduling(rendered.manifests[-1])},
            events=[JobEvent(time.time(), "Submitted",
                             f"{spec.workers} worker(s) x {spec.procs_per_worker or 1} process(es) "
                             f"as a {kind} ({flavor}) in namespace {ns}")],
        )  # fmt: skip
        # The row reserves the name, committed at once and marked "launching": the
        # HTTP calls below run outside any store transaction (a slow cluster would hold
        # SQLite's write lock, and every other writer in every process, for as long).
        # Until the mark goes, the watches leave the row alone, as they would a missing
        # one; a launch that dies leaves the mark to say so (_settle_launch).
        token = uuid.uuid4().hex
        record.details.update(launching=token, launcher=_launcher())
        try:
            self.store.insert(record)
        except sqlite3.IntegrityError:
            raise SpecError("name", f"a job named {name!r} already exists",
                            f"pick another --name, or `workbench delete {name}` first") from None  # fmt: skip
        created: list[tuple[str, str]] = []
        try:
            if files.dir.exists():
                shutil.rmtree(files.dir)  # a folder no job owns (a crashed launch)
            # The folder, with spec.yaml, is made when it has something to hold: here
            # only for what must be saved now, else with the logs the job's end copies
            # (JobSync). The row holds the spec meanwhile; a mkdir and a file create
            # were a fifth to a half of a submit's client CPU on this disk (docs/benchmarks.md).
            secrets = spec.secrets()
            if any(secrets.values()) or spec.max_retries:
                files.ensure(redacted)
            if any(secrets.values()):  # none: rerun reads no file as none saved
                files.write_secrets(secrets)  # for rerun: 0600, never on the cluster's side
            if spec.max_retries:  # what a gang restart creates again (read only then),
                # marked as the first attempt is: whose it is outlives a restart
                marked = self._marked(rendered.manifests[-1], digest)
                (files.dir / WORKLOAD_FILE).write_text(json.dumps(marked))
            # The namespace's shared Service (the pods' DNS names; no job's own) is made
            # sure of first, once a minute per namespace. The Secret exists before the
            # workload makes pods (they read it), and becomes the workload's once that
            # exists: a PATCH, as an ownerReference needs the owner's uid. So a job
            # without credentials costs one request: its workload.
            for shared in rendered.manifests[:-1]:
                cluster.ensure_service(ns, shared)
            if rendered.secret is not None:
                self._create_ours(cluster, ns, self._marked(rendered.secret, digest), digest)
                created.append(("Secret", rendered.secret["metadata"]["name"]))
            workload = self._create_workload(
                cluster, ns, self._marked(rendered.manifests[-1], digest), digest
            )
            created.append((kind, name))
            if rendered.secret is not None:  # it goes with the workload
                cluster.own(ns, "Secret", rendered.secret["metadata"]["name"], workload)
            self.store.update(name, details={"uid": workload["metadata"]["uid"],
                                             "launching": None, "launcher": None})  # fmt: skip
        except BaseException as e:
            for k, n in reversed(created):
                cluster.delete_quietly(ns, k, n)
            shutil.rmtree(files.dir, ignore_errors=True)
            with contextlib.suppress(Exception):  # else the mark stays: _settle_launch
                self.store.delete(name, only_if={"launching": token})
            if isinstance(e, UNREACHABLE):
                raise SubmitError(self.name, f"the cluster did not answer: {e}") from None
            raise
        tracker = self._tracker(ns, context)
        if tracker is not None:
            tracker._sync(name, gone=False)  # what the watch saw before the row existed
        self._context(context)[2].claim_events(name)  # and the scheduler's events then
        return self.get(name)

    def _existing(self, name: str, digest: str) -> JobRecord | None:
        """The job this store already holds under ``name`` with this spec, or None;
        SpecError when the name is taken by another spec. (A job of the same name made
        elsewhere shows as a 409 when the workload is created: _create_workload.) A launch
        of the name under way is waited for; a dead one's row is cleared, and what it
        created is adopted by the same spec (_create_workload) or deleted for another."""
        row = self.store.row(name)
        if row is not None and row["details"].get("launching"):
            same = row["details"].get("spec_hash") == digest
            row = self._settle_launch(name, row["details"], keep_objects=same)
        if row is None:
            return None
        if row["backend"] == self.name and row["details"].get("spec_hash") == digest:
            return self.get(name)
        raise SpecError("name", f"a job named {name!r} already exists with another spec",
                        f"pick another --name, or `workbench delete {name}` first")  # fmt: skip

    def _settle_launch(self, name: str, details: dict[str, Any], keep_objects: bool = False,
                       wait: bool = True) -> dict[str, Any] | None:  # fmt: skip
        """The row of ``name`` (whose ``details`` a launch marked) once that launch is over
        (waited for; as it is now unless ``wait``), or None when there is none: the launch
        died, and its row, folder and (unless ``keep_objects``) the objects it made for
        that spec are cleared, as if it had never begun."""
        row: dict[str, Any] | None = None
        while details.get("launching"):
            if _launch_dead(details):
                self._clear_dead_launch(name, details, keep_objects)
            elif not wait:
                return row or self.store.row(name)
            else:
                time.sleep(0.05)
            row = self.store.row(name)
            if row is None:
                return None
            details = row["details"]
        return row or self.store.row(name)

    def _clear_dead_launch(self, name: str, d: dict[str, Any], keep_objects: bool) -> None:
        log.info("kubernetes: clearing job %s, whose launch (pid %s) died before it finished",
                 name, (d.get("launcher") or {}).get("pid"))  # fmt: skip
        if not self.store.delete(name, only_if={"launching": d["launching"]}):
            return  # another process cleared it first, or the launch finished after all
        if d.get("job_dir"):
            shutil.rmtree(d["job_dir"], ignore_errors=True)
        cluster = self._context(d.get("context"))[0]
        if keep_objects or not cluster.configured:
            return
        ns, digest = d.get("namespace") or self.kube.namespace, d.get("spec_hash") or ""
        try:
            for kind, obj in ((d.get("kind", "Job"), name), ("Service", d.get("service")),
                              ("Secret", d.get("secret"))):  # fmt: skip
                if not obj:
                    continue
                if kind in ("Secret", "Service"):
                    meta = cluster.metadata(ns, kind, obj)
                else:
                    found = cluster.workload(ns, kind, obj)
                    meta = found["metadata"] if found else None
                if meta is not None and self._ours(meta, digest):
                    cluster.delete_quietly(ns, kind, obj)
        except (SubmitError, *UNREACHABLE) as e:
            log.info("kubernetes: could not delete what %s's launch left (%s)", name, e)

    def _marked(self, obj: dict[str, Any], digest: str) -> dict[str, Any]:
        """``obj`` with this home's ORIGIN and the spec's hash among its annotations."""
        notes = {**(obj["metadata"].get("annotations") or {}), SPEC_HASH: digest,
                 ORIGIN: self.origin}  # fmt: skip
        return {**obj, "metadata": {**obj["metadata"], "annotations": notes}}

    def _ours(self, meta: dict[str, Any] | None, digest: str) -> bool:
        """Whether an object found under a job's name was made by this home for this
        spec: launch runs only when the store holds no row of that name, so such an
        object is a killed launch's, not another job's."""
        notes = (meta or {}).get("annotations") or {}
        return bool(notes.get(ORIGIN) == self.origin and notes.get(SPEC_HASH) == digest)

    def _create_ours(self, cluster: Cluster, ns: str, body: dict[str, Any], digest: str) -> None:
        """Create a Secret. One of the same name that a killed launch of this spec made is
        made again (its values may have changed since; the hash covers only their names)."""
        kind, name = body["kind"], body["metadata"]["name"]
        try:
            cluster.create(ns, body)
            return
        except SpecError:
            try:
                found = cluster.metadata(ns, kind, name)
            except UNREACHABLE as e:
                raise SubmitError(self.name, f"the cluster did not answer: {e}") from None
            if not self._ours(found, digest):
                raise
        cluster.delete_quietly(ns, kind, name)
        cluster.create(ns, body)

    def _create_workload(self, cluster: Cluster, ns: str, body: dict[str, Any],
                         digest: str) -> dict[str, Any]:  # fmt: skip
        """Create the workload; on a 409 adopt a killed launch's (this home, this spec)
        or say whose it is (no read before the create: a name taken on the cluster is
        rare, a request per submit is not)."""
        kind, name = workload_kind(body), body["metadata"]["name"]
        try:
            return cluster.create(ns, body)
        except SpecError:
            try:
                found = cluster.workload(ns, kind, name)
            except UNREACHABLE as e:
                raise SubmitError(self.name, f"the cluster did not answer: {e}") from None
            if found is not None and found["metadata"].get("deletionTimestamp"):
                raise SpecError("name", f"{kind} {name} is still being deleted in namespace {ns}",
                                "submit again once it is gone, or pick another --name") from None  # fmt: skip
            if found is not None and self._ours(found["metadata"], digest):
                log.info("kubernetes: adopting %s %s, left by a launch that did not finish",
                         kind, name)  # fmt: skip
                return found
            if found is not None and (
                (found["metadata"].get("annotations") or {}).get(SPEC_HASH) == digest
            ):
                raise SpecError("name", f"{kind} {name} already runs in namespace {ns} "
                                "(submitted from another workbench)", "pick another --name") from None  # fmt: skip
            raise SpecError("name", f"a job named {name!r} already exists with another spec",
                            f"pick another --name, or `workbench delete {name}` first") from None  # fmt: skip

    def master_address(self, name: str) -> tuple[str, int]:
        """Where rank 0 of job ``name`` listens: its cluster DNS name (what MASTER_ADDR
        names, qualified with the namespace) and the contract's master port."""
        details = self.get(name).details
        ns = details.get("namespace") or self.kube.namespace
        if details.get("flavor") == "indexed":
            # a job from before the shared Service has its own
            host = f"{name}-0.{details.get('service') or RANKS_SERVICE}.{ns}.svc"
        else:
            host = f"{name}-master-0.{ns}.svc"  # the training-operator's Service of rank 0
        return host, self.kube.master_port

    # ---- status ---------------------------------------------------------------------------
    def _tracker(self, namespace: str, context: str | None = None) -> NamespaceTracker | None:
        """The running watches of ``namespace`` (started now if needed; None: no cluster)."""
        cluster, _, sync = self._context(context)
        if not cluster.configured:
            return None
        key = (context, namespace)
        with self._lock:
            tracker = self._trackers.get(key)
            if tracker is None or not tracker.alive:
                if tracker is not None:
                    tracker.stop()
                if not self._trackers:
                    # Watch threads writing the store while the interpreter tears down
                    # abort the process (a CLI exits right after submit): stop them first.
                    atexit.register(self.stop_watches)
                try:
                    tracker = NamespaceTracker(cluster, namespace, sync).start()
                except Exception:  # no cluster now: get() reads once instead
                    return None
                self._trackers[key] = tracker
            return tracker

    def reconcile(self) -> int:
        """Clear the rows of launches that died, and make sure every namespace with an
        active job has its watches running (the watch threads write the changes
        themselves); returns how many rows were cleared."""
        rows, cleared = self.store.active_rows(self.name), 0
        for r in rows:
            if r["details"].get("launching") and _launch_dead(r["details"]):
                cleared += self._settle_launch(r["name"], r["details"], wait=False) is None
        for context, ns in {
            (r["details"].get("context"), r["details"].get("namespace")) for r in rows
        }:
            if ns:
                self._tracker(ns, context)
        return cleared

    def stop_watches(self) -> None:
        """Stop every namespace's watches (at exit, and in close())."""
        with self._lock:
            trackers, self._trackers = list(self._trackers.values()), {}
        for t in trackers:
            t.stop()
        for _, _, sync in list(self._contexts.values()):
            with sync.lock:  # a write under way finishes before the process goes
                pass

    def close(self) -> None:
        """Stop every watch and close the client."""
        self.stop_watches()
        for cluster, _, _ in list(self._contexts.values()):
            cluster.close()

    def get(self, name: str) -> JobRecord:
        """The stored record; read once from the cluster when no watch keeps it current."""
        record = self.store.get(name)
        if record is None or record.backend != self.name:
            raise JobNotFoundError(self.name, name)
        if record.details.get("launching"):  # Pending as it is: the launch is under way
            if self._settle_launch(name, record.details, wait=False) is None:
                raise JobNotFoundError(self.name, name)  # it died: cleared
            return record
        ns = record.details.get("namespace", "")
        tracker = self._trackers.get((record.details.get("context"), ns))
        if not record.status.terminal and (tracker is None or not tracker.alive):
            self._read_once(record)
            record = self.store.get(name) or record
        return record

    def _read_once(self, record: JobRecord) -> None:
        d = record.details
        cluster, _, sync = self._of(record)
        if not cluster.configured:
            return
        try:
            workload = cluster.workload(d["namespace"], d["kind"], record.name)
            pods = cluster.pods(d["namespace"], record.name)
            podgroup = None
            if d["kind"] == VOLCANO_KIND and workload is not None and not pods:
                podgroup = cluster.podgroup(d["namespace"], record.name)  # why it waits
        except (SubmitError, *UNREACHABLE):
            return  # the cluster is away: the stored record is the best answer
        sync.sync(record.name, workload, pods, gone=workload is None, fresh=True,
                  podgroup=podgroup)  # fmt: skip

    def cancel(self, name: str, wait: float = 30.0) -> JobRecord:
        """Record Cancelling, copy each rank's log into the job folder, and delete the
        workload in the foreground; returns then (``wait <= 0``) or once the watch has seen
        the pods go."""
        record = self.get(name)
        if record.details.get("launching"):  # the workload may not exist yet: wait for it
            if self._settle_launch(name, record.details) is None:
                raise JobNotFoundError(self.name, name)
            record = self.get(name)
        if record.status.terminal:
            return record
        d = record.details
        self.store.request_cancel(name, JobEvent(time.time(), "Cancelling",
                                                 f"deleting {d['kind']} {name} (foreground)",
                                                 "warning"))  # fmt: skip
        cluster, logs, sync = self._of(record)
        # The pods go with the workload, and their logs with them: read each rank's log
        # first (for CANCEL_COPY_SECONDS at most, and the logs' last lines for
        # logcopy.TAIL_SECONDS more: a runaway log must not hold the cancel),
        # keep it once the delete is sent (what they print after is not kept).
        try:
            staged = logs.stage(d["namespace"], record.job_dir, sync.pods_to_copy(name),
                                record.attempt, CANCEL_COPY_SECONDS)  # fmt: skip
        except Exception:  # the cancel goes on without the copy
            staged = None
        try:
            deleted = cluster.delete_workload(d["namespace"], d["kind"], name)
        except (SubmitError, *UNREACHABLE) as e:
            # Not cancelled: the job runs on, so its row must not say Cancelling (the
            # watch would never move it on, and hide how it really ends).
            why = (
                str(e.detail) if isinstance(e, SubmitError) else f"the cluster did not answer: {e}"
            )
            logs.discard(staged)
            self.store.withdraw_cancel(name, record.status, JobEvent(
                time.time(), "CancelFailed", f"not cancelled: {why}", "error"))  # fmt: skip
            raise SubmitError(self.name, f"{why} (job {name} was not cancelled; "
                                         "cancel it again once the cluster answers)") from None  # fmt: skip
        with contextlib.suppress(Exception):
            sync.kept_copies(name, logs.commit(staged))
        if not deleted:  # already gone (a retry between attempts): nothing left to stop
            sync.sync(name, None, [], gone=True)
        deadline = time.monotonic() + max(0.0, wait)
        record = self.store.get(name) or record
        while wait > 0 and not record.status.terminal and time.monotonic() < deadline:
            time.sleep(0.1)
            record = self.get(name)
        return record

    def delete(self, name: str) -> None:
        """Forget a finished job: its row, folder, Secret, Service and workload."""
        record = self.get(name)
        if not record.status.terminal:
            raise SpecError("name", f"job {name!r} is {record.status.value}",
                            "cancel it before deleting")  # fmt: skip
        self.store.delete(name)
        if record.job_dir:
            shutil.rmtree(record.job_dir, ignore_errors=True)
        d = record.details
        cluster = self._of(record)[0]
        if cluster.configured and d.get("namespace"):
            for kind, obj in (("Secret", d.get("secret")), ("Service", d.get("service")),
                              (d.get("kind", "Job"), name)):  # fmt: skip
                if obj:
                    cluster.delete_quietly(d["namespace"], kind, obj)

    def rerun_spec(self, name: str) -> TrainSpec:
        """The job's spec with the credentials saved at submit."""
        record = self.get(name)
        saved = JobFiles(Path(record.job_dir)).read_secrets() if record.job_dir else {}
        spec = TrainSpec.from_dict(record.spec).restore_secrets(saved)
        spec.name = None
        return spec

    # ---- logs -----------------------------------------------------------------------------
    def logs(self, name: str, rank: int | None = 0, follow: bool = False, tail: int | None = None,
             stop: threading.Event | None = None) -> Iterator[str]:  # fmt: skip
        """One rank's lines (earlier attempts' saved logs, then its pod's), or every rank's
        prefixed; follow goes on until the job ends or ``stop`` is set."""
        record = self.get(name)
        try:
            yield from self._of(record)[1].lines(self, record, rank, follow, tail, stop)
        except UNREACHABLE as e:  # the readers retry a dropped stream; this is no cluster
            raise SubmitError(self.name, f"the cluster did not answer: {e}") from None
        except ApiException as e:  # listing the job's pods (403, 401)
            raise api_error(e, f"reading the logs of job {name}") from None
        if follow:
            # The pods' logs end as the pods do; the job ends once the watch has written it
            # (or a retry starts). A follower returns when the job it followed has ended.
            deadline = time.monotonic() + SETTLE
            while not (stop is not None and stop.is_set()) and time.monotonic() < deadline:
                if self.get(name).status.terminal:
                    return
                time.sleep(0.05)

    # ---- nodes ----------------------------------------------------------------------------
    def nodes(self) -> builtins.list[NodeInfo]:
        """Each node's GPUs (allocatable nvidia.com/gpu) and which jobs' pods hold them."""
        if not self.cluster.configured:
            return []
        try:
            nodes, pods = self.cluster.nodes(), self.cluster.all_pods()
        except UNREACHABLE as e:
            raise SubmitError(self.name, f"the cluster did not answer: {e}") from None
        known = {r.name: (r.status.value, r.gpus_total)
                 for r in self.store.list(backend=self.name, with_events=False)}  # fmt: skip
        return capacity.node_infos(nodes, pods, known)

    def capabilities(self) -> Capabilities:
        """Pods, whole GPUs, the mount schemes the manifests support, and the flavours the
        cluster serves (both, unchecked, without a cluster)."""
        flavours: tuple[str, ...] = FLAVORS
        if self.cluster.configured:
            with contextlib.suppress(Exception):
                served = {"kubeflow": self.cluster.serves(*KUBEFLOW[:2]),
                          "volcano": self.cluster.serves(*VOLCANO[:2])}  # fmt: skip
                flavours = tuple(f for f in FLAVORS if served.get(f, True))
        modes = ("whole",) if self.kube.gpu_sharing == "none" else ("whole", "fractional")
        return Capabilities(runtimes=("pod",), gpu_modes=modes,
                            data_schemes=DATA_SCHEMES, flavours=flavours)  # fmt: skip


def _scheduling(workload: dict[str, Any]) -> dict[str, Any]:
    """details["queue"] / ["priority_class"] of a workload, where it names them."""
    spec = workload.get("spec") or {}
    out: dict[str, Any] = {}
    if workload_kind(workload) == VOLCANO_KIND:
        out["queue"] = spec.get("queue") or "default"
    pods = _templates(workload)
    priority = spec.get("priorityClassName") or next(
        (t["spec"]["priorityClassName"] for t in pods if t["spec"].get("priorityClassName")), None
    )
    if priority:
        out["priority_class"] = priority
    return out


def _templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates of a Job, Kubeflow job or Volcano Job."""
    spec = workload.get("spec") or {}
    if "template" in spec:
        return [spec["template"]]
    # Kubeflow's pytorch/tf/mpiReplicaSpecs, or a Volcano Job's tasks
    groups = [v for k, v in spec.items() if k.endswith("ReplicaSpecs") and isinstance(v, dict)]
    replicas = [*(r for g in groups for r in g.values()), *(spec.get("tasks") or [])]
    return [r["template"] for r in replicas if "template" in r]
