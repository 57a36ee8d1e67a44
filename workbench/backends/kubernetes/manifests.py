"""TrainSpec -> Kubernetes manifest dicts. Pure: no client, no cluster, no file reads.

Two flavours:

* ``indexed``: a batch/v1 Job in Indexed completion mode (completions = parallelism =
  workers) plus the namespace's headless Service RANKS_SERVICE, which every indexed
  job's pods share (as JobSet's ``network.subdomain`` shares one); each pod's hostname is
  ``JOB-INDEX`` and its subdomain that Service, so rank 0 is ``JOB-0.workbench-ranks``.
  Ranks come from the ``batch.kubernetes.io/job-completion-index`` annotation (what
  JOB_COMPLETION_INDEX is made of), through the downward API.
* ``kubeflow``: a kubeflow.org/v1 PyTorchJob, TFJob or MPIJob by the spec's framework
  (kubeflow.py). The training-operator sets the framework's own variables itself
  (MASTER_ADDR/RANK/PET_*, TF_CONFIG, the MPI hostfile); workbench adds the rest.

Both give each worker the env of workbench.contract, the same a local job gets, so an
unmodified ``torchrun`` forms the world from PET_*. Workers other than rank 0 wait in an
init container until the master's DNS name resolves (the start-up race Kubeflow's own
init container avoids the same way). Object-store outputs are emptyDirs that the main
container's wrapper (``python -m workbench.data run --upload DST URL -- CMD``) uploads when
CMD ends, whatever its exit code. Credentials reach pods only through the Secret the
backend creates from :attr:`RenderedJob.secret`; no manifest in
:attr:`RenderedJob.manifests` holds a credential.
"""

from __future__ import annotations

import copy
import math
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ...catalog import InstanceSpec
from ...contract import World, worker_env
from ...data.run_and_upload import UPLOAD_ENV_PREFIX
from ...errors import MountError, SpecError
from ...redaction import REDACTED, redact_url, userinfo_credentials
from ...spec import Mount, TrainSpec
from . import volcano
from .csi import csi_volume
from .kubeflow import render_kubeflow
from .sharing import gpu_limits

FLAVORS = ("indexed", "kubeflow", "volcano")
LABEL_JOB = "workbench.io/job"
LABEL_FLAVOR = "workbench.io/flavor"
LABEL_MANAGED = "app.kubernetes.io/managed-by"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
GPU_RESOURCE = "nvidia.com/gpu"
STAGE_ROOT = "/workbench/stage"
RANK_DEPENDENT = ("RANK", "PET_NODE_RANK", "WORKBENCH_RANK")
# URL userinfo -> the variables fsspec's implementation reads (workbench.data.urls).
CREDENTIAL_ENV = {
    "s3": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "s3a": ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"),
    "oss": ("OSS_ACCESS_KEY_ID", "OSS_ACCESS_KEY_SECRET"),
}
# The headless Service indexed jobs' pods share (ranks_service): rank 0 is JOB-0.workbench-ranks
RANKS_SERVICE = "workbench-ranks"
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")


@dataclass(frozen=True)
class ClusterOptions:
    """Where and how jobs run on the cluster (config, catalogue and cluster defaults
    resolved by the backend)."""

    namespace: str = "default"
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    priority_class: str | None = None
    master_port: int = 23456  # Kubeflow's default PyTorchJob port
    # The image of the init container that waits for the master's DNS name (needs a
    # POSIX shell and nslookup; Kubeflow uses alpine for the same job).
    wait_image: str = "busybox:1.36"
    master_wait_seconds: int = 600
    ttl_seconds_after_finished: int | None = None
    queue: str | None = None  # the Volcano queue when the spec names none
    scheduler_name: str | None = None  # pods' schedulerName (Volcano Jobs: "volcano")
    gpu_sharing: str = "none"  # none | gpushare | hami: how a fraction of a GPU is asked for
    # scheme -> {"driver": CSI driver, "volume_attributes": {...}, ...} (config csi_drivers)
    csi_drivers: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class RenderedJob:
    """What a job becomes on the cluster."""

    name: str
    flavor: str
    namespace: str
    # Safe to print (``--dry-run``) and to store: references to the Secret, never values.
    manifests: list[dict[str, Any]]
    # The Secret the backend creates before the workload (None when nothing is secret).
    # Holds credentials: never print, log or store it; display_manifests() masks it.
    secret: dict[str, Any] | None = field(default=None, repr=False)

    def display_manifests(self) -> list[dict[str, Any]]:
        """Every object that would be created, the Secret's values masked."""
        out = list(self.manifests)
        if self.secret is not None:
            masked = {k: REDACTED for k in self.secret["stringData"]}
            out.insert(0, {**self.secret, "stringData": masked})
        return out

    def to_yaml(self) -> str:
        """``kubectl create --dry-run=client -o yaml``-style text of display_manifests()."""
        import yaml

        class _Dumper(yaml.SafeDumper):
            # Pod templates share lists: spelled out, not as &anchors kubectl users must chase
            # (and that `workbench submit -f` refuses, as every bounded YAML reader should).
            def ignore_aliases(self, data: Any) -> bool:
                return True

        return yaml.dump_all(self.display_manifests(), Dumper=_Dumper, sort_keys=False)


def ranks_service(options: ClusterOptions) -> dict[str, Any]:
    """The headless Service that gives indexed jobs' pods their DNS names, one per
    namespace and shared (the backend ensures it, and no job owns it). A job's pod names
    are unique in the namespace (``JOB-INDEX``, and job names are), so one Service serves
    all: one object per job fewer to create, and none to count against a namespace's
    ``services`` quota. It selects by flavour, not by job, and has no ports (a headless
    Service needs none for A records, and jobs may listen on different ones)."""
    selector = {LABEL_MANAGED: "workbench", LABEL_FLAVOR: "indexed"}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(RANKS_SERVICE, options, selector),
        "spec": {
            "clusterIP": "None",
            "selector": selector,
            # Workers look the master up before it is ready: its record must exist early.
            "publishNotReadyAddresses": True,
        },
    }


def secret_name(job: str) -> str:
    """The Secret that holds one job's credentials."""
    return f"{job}-credentials"


def job_labels(job: str, flavor: str) -> dict[str, str]:
    """Labels on every object of a job; the watch selects on LABEL_JOB's presence."""
    return {LABEL_JOB: job, LABEL_FLAVOR: flavor, LABEL_MANAGED: "workbench"}


def render(spec: TrainSpec, offer: InstanceSpec, image: str, options: ClusterOptions,
           flavor: str = "indexed") -> RenderedJob:  # fmt: skip
    """The manifests of ``spec`` (validated, named) for ``flavor``; SpecError names the
    field a cluster cannot honour."""
    if flavor not in FLAVORS:
        raise SpecError("flavor", f"unknown flavour {flavor!r}", f"use one of {', '.join(FLAVORS)}")
    if not spec.name:
        raise SpecError("name", "a cluster job needs a name", "give --name, e.g. mnist-1")
    framework = spec.framework or "pytorch"
    if flavor == "indexed" and framework in ("tensorflow", "mpi"):
        # TF_CONFIG names each task and MPI needs a launcher: their operators do that.
        raise SpecError(
            "backend_options.flavor",
            f"a {framework} job needs the {'TFJob' if framework == 'tensorflow' else 'MPIJob'} "
            "of flavour kubeflow, not an Indexed Job",
            "use --flavor kubeflow (a cluster with the Kubeflow training-operator)",
        )
    if flavor in ("kubeflow", "volcano") and not DNS1035.match(spec.name):
        raise SpecError(
            "name",
            f"{spec.name!r} starts with a digit, but the {flavor} controller names Services "
            "after it",
            "start the name with a letter, e.g. job-" + spec.name,
        )
    builder = _PodBuilder(spec, offer, image, options, flavor)
    labels = job_labels(spec.name, flavor)
    manifests = RENDERERS[flavor](spec, options, builder, labels)
    secret = None
    if builder.secret_data:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _meta(secret_name(spec.name), options, labels),
            "type": "Opaque",
            "stringData": dict(builder.secret_data),
        }
    return RenderedJob(spec.name, flavor, options.namespace, manifests, secret)


# `workbench export --as KIND`: kind -> (flavour, framework; None keeps the spec's own).
KINDS: dict[str, tuple[str, str | None]] = {
    "indexed": ("indexed", None),
    "pytorchjob": ("kubeflow", "pytorch"),
    "tfjob": ("kubeflow", "tensorflow"),
    "mpijob": ("kubeflow", "mpi"),
    "volcano": ("volcano", None),
}


def render_as(spec: TrainSpec, offer: InstanceSpec, image: str, options: ClusterOptions,
              kind: str = "pytorchjob") -> RenderedJob:  # fmt: skip
    """The manifests of ``spec`` as export kind ``kind`` (KINDS): a flavour, and for the
    Kubeflow kinds the framework whose job kind it renders."""
    if kind not in KINDS:
        raise SpecError("as", f"unknown kind {kind!r}", f"use one of {', '.join(KINDS)}")
    flavor, framework = KINDS[kind]
    if framework is not None and framework != (spec.framework or "pytorch"):
        spec = copy.copy(spec)
        spec.framework = framework
    return render(spec, offer, image, options, flavor)


def _meta(name: str, options: ClusterOptions, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": options.namespace, "labels": dict(labels)}


def _indexed(spec: TrainSpec, options: ClusterOptions, builder: _PodBuilder,
             labels: dict[str, str]) -> list[dict[str, Any]]:  # fmt: skip
    name, svc = spec.name or "", RANKS_SERVICE
    master = f"{name}-0.{svc}"
    index_ref = {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}
    world = World(
        workers=spec.workers,
        procs_per_worker=spec.procs_per_worker or 1,
        master_addr=master,
        master_port=options.master_port,
        hosts=tuple(f"{name}-{i}.{svc}" for i in range(spec.workers)),
        ports=(options.master_port,) * spec.workers,
    )
    contract = worker_env(spec.framework or "pytorch", world, 0, name)
    env: list[dict[str, Any]] = [{"name": "PYTHONUNBUFFERED", "value": "1"}]
    for key, value in contract.items():
        if key in RANK_DEPENDENT:
            env.append({"name": key, "valueFrom": index_ref})
        else:
            env.append({"name": key, "value": value})
    # Every rank waits for the master's name, rank 0 for its own: a pod's record is
    # published only once the pod has an address.
    init = [builder.wait_for_master(master)]
    pod = builder.pod_spec("worker", env, builder.args(), init, port_name="master")
    pod["subdomain"] = svc  # with the hostname JOB-INDEX: the pod's DNS name
    pod["restartPolicy"] = "Never"
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.workers,
        "parallelism": spec.workers,
        "backoffLimit": spec.max_retries,
        "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
    }
    if spec.timeout:
        job_spec["activeDeadlineSeconds"] = math.ceil(spec.timeout)
    if options.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = options.ttl_seconds_after_finished
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": _meta(name, options, labels),
           "spec": job_spec}  # fmt: skip
    return [ranks_service(options), job]


# flavour -> renderer(spec, options, builder, labels) -> manifests (the workload last)
Renderer = Callable[
    [TrainSpec, ClusterOptions, "_PodBuilder", dict[str, str]], list[dict[str, Any]]
]
RENDERERS: dict[str, Renderer] = {
    "indexed": _indexed,
    "kubeflow": render_kubeflow,
    "volcano": volcano.render_volcano,
}


class _PodBuilder:
    """Pod specs of one job: resources, volumes, init containers and the Secret's keys."""

    def __init__(self, spec: TrainSpec, offer: InstanceSpec, image: str, options: ClusterOptions,
                 flavor: str) -> None:  # fmt: skip
        self.spec, self.offer, self.image, self.options = spec, offer, image, options
        self.secret = secret_name(spec.name or "")
        self.secret_data: dict[str, str] = {}
        self.secret_env = self._user_secret_env()
        self.volumes: list[dict[str, Any]] = []
        self.mounts: list[dict[str, Any]] = []
        self.prefetch: list[dict[str, Any]] = []
        self.uploads: list[tuple[str, str]] = []  # (mount path, URL without credentials)
        self.upload_env: list[dict[str, Any]] = []
        for i, m in enumerate(spec.data):
            self._mount(m, f"data-{i}", "data")
        for i, m in enumerate(spec.outputs):
            self._mount(m, f"output-{i}", "outputs")

    def _ref(self, env_name: str, key: str, value: str) -> dict[str, Any]:
        self.secret_data[key] = value
        return {"name": env_name,
                "valueFrom": {"secretKeyRef": {"name": self.secret, "key": key}}}  # fmt: skip

    def _user_secret_env(self) -> list[dict[str, Any]]:
        refs = [self._ref(k, k, v) for k, v in self.spec.secret_env().items()]
        for i, arg in (self.spec.secrets().get("command") or {}).items():
            refs.append(self._ref(f"WORKBENCH_SECRET_ARG_{i}", f"arg-{i}", arg))
        return refs

    def args(self) -> list[str]:
        """The spec's command as Kubernetes should run it: ``$(`` escaped (Kubernetes
        expands ``$(VAR)`` in commands), secret arguments as ``$(WORKBENCH_SECRET_ARG_i)``."""
        secret_args = self.spec.secrets().get("command") or {}
        return [f"$(WORKBENCH_SECRET_ARG_{i})" if str(i) in secret_args else arg.replace("$(", "$$(")
                for i, arg in enumerate(self.spec.command)]  # fmt: skip

    def _put_secret(self, key: str, value: str) -> None:
        if self.secret_data.get(key, value) != value:
            raise SpecError("data", f"two CSI volumes need different values for Secret key {key}",
                            "mount them with the same credentials, or one through the init copy")  # fmt: skip
        self.secret_data[key] = value

    def _mount(self, m: Mount, volume: str, key: str) -> None:
        from ...data.urls import OBJECT_STORES, parse_url

        entry = self.options.csi_drivers.get(m.scheme)
        try:
            # A scheme only a CSI driver knows (cpfs://) is the driver's to read.
            url = parse_url(m.src, key) if entry is None or m.scheme in OBJECT_STORES else None
        except MountError as e:
            raise SpecError(key, str(e)) from None
        dst = m.dst
        if not dst.startswith("/"):
            if not self.spec.working_dir:
                raise SpecError(key, f"destination {dst!r} of {m!r} is relative",
                                "give an absolute DST such as /data, or set working_dir")  # fmt: skip
            dst = posixpath.join(self.spec.working_dir, dst)
        read_only = m.mode == "ro"
        mount: dict[str, Any] = {"name": volume, "mountPath": dst, "readOnly": read_only}
        if entry is not None or url is None:  # the driver table's CSI volume (csi_drivers)
            source = csi_volume(m.src, read_only, entry or {}, self.spec.env, self.secret,
                                self._put_secret)  # fmt: skip
            self.volumes.append({"name": volume, "csi": source})
        elif url.scheme == "pvc":
            self.volumes.append({"name": volume, "persistentVolumeClaim": {
                "claimName": url.bucket, "readOnly": read_only}})  # fmt: skip
            if url.key.strip("/"):
                mount["subPath"] = url.key.strip("/")
        elif url.scheme == "nas":
            self.volumes.append({"name": volume, "nfs": {
                "server": url.bucket, "path": "/" + url.key.strip("/"), "readOnly": read_only}})  # fmt: skip
        elif url.scheme in ("", "file"):
            raise SpecError(key, f"{m!r} is a local path, which pods on a cluster cannot see",
                            "upload it (s3://, oss://) or use pvc://CLAIM/PATH or nas://SERVER/PATH")  # fmt: skip
        elif key == "outputs":
            # Portable mode: the pod writes into an emptyDir, and the main container's
            # wrapper uploads it when the command ends (see _upload_wrapper).
            self.volumes.append({"name": volume, "emptyDir": {}})
            mount["readOnly"] = False  # an output is written, whatever its mode says
            self._upload(m, url.scheme, volume, dst)
        else:
            self.volumes.append({"name": volume, "emptyDir": {}})
            self.prefetch.append(self._prefetch(m, url.scheme, volume))
        self.mounts.append(mount)

    def _prefetch(self, m: Mount, scheme: str, volume: str) -> dict[str, Any]:
        """An init container that copies an object-store source into the pod's volume
        through workbench.data (the fsspec code local jobs use)."""
        from ...data.urls import ENV_OPTIONS

        src, env = m.src, list(self.secret_env)
        # Where the store is (AWS_ENDPOINT_URL, OSS_ENDPOINT, a region) is not secret, but
        # the prefetch cannot work without it: the job's plain values of those names.
        storage = {n for opts in ENV_OPTIONS.values() for names in opts.values() for n in names}
        secret = self.spec.secret_env()
        env += [{"name": k, "value": v} for k, v in self.spec.env.items()
                if k in storage and k not in secret]  # fmt: skip
        creds = userinfo_credentials(src)
        if creds:
            src, user, password = creds
            names = CREDENTIAL_ENV.get(scheme)
            if names is None:
                raise SpecError("data", f"{m!r}: credentials in a {scheme}:// URL",
                                "pass them with --env for that filesystem instead")  # fmt: skip
            env += [self._ref(names[0], f"{volume}-key", user),
                    self._ref(names[1], f"{volume}-secret", password)]  # fmt: skip
        if redact_url(src) != src:
            raise SpecError("data", f"{m!r} holds credentials in its query string",
                            "pass them with --env (e.g. AWS_SECRET_ACCESS_KEY) instead")  # fmt: skip
        target = f"{STAGE_ROOT}/{volume}"
        return {
            "name": f"prefetch-{volume}",
            "image": self.image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["python", "-m", "workbench.data", "prefetch", src, target],
            "env": env,
            "volumeMounts": [{"name": volume, "mountPath": target}],
        }

    def _upload(self, m: Mount, scheme: str, volume: str, dst: str) -> None:
        """Record an object-store output for the main container's upload wrapper; its
        credentials go to the Secret, under names only the wrapper reads."""
        src = m.src
        creds = userinfo_credentials(src)
        if creds:
            src, user, password = creds
            names = CREDENTIAL_ENV.get(scheme)
            if names is None:
                raise SpecError("outputs", f"{m!r}: credentials in a {scheme}:// URL",
                                "pass them with --env for that filesystem instead")  # fmt: skip
            prefix = f"{UPLOAD_ENV_PREFIX}{len(self.uploads)}_"
            self.upload_env += [self._ref(prefix + names[0], f"{volume}-key", user),
                                self._ref(prefix + names[1], f"{volume}-secret", password)]  # fmt: skip
        if redact_url(src) != src:
            raise SpecError("outputs", f"{m!r} holds credentials in its query string",
                            "pass them with --env (e.g. AWS_SECRET_ACCESS_KEY) instead")  # fmt: skip
        self.uploads.append((dst, src))

    def wrap(self, command: list[str]) -> list[str]:
        """``command`` run under ``python -m workbench.data run``, which uploads the
        object-store outputs when it ends (any exit code) and keeps that exit code."""
        if not self.uploads:
            return command
        wrapper = ["python", "-m", "workbench.data", "run"]
        for dst, url in self.uploads:
            wrapper += ["--upload", dst.replace("$(", "$$("), url.replace("$(", "$$(")]
        return [*wrapper, "--", *command]

    def wait_for_master(
        self, master: str, skip_rank_zero: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """An init container that returns once ``master`` resolves (or fails after the
        configured wait), so no rank dials a name that does not exist yet (rank 0 skips
        it with ``skip_rank_zero``, the field that holds the rank, where its own name is
        published before its pod starts)."""
        limit = self.options.master_wait_seconds
        # $$ is Kubernetes' escape for $: it would otherwise read $(...) as a variable.
        skip = 'if [ "$WORKBENCH_RANK" = 0 ]; then exit 0; fi; ' if skip_rank_zero else ""
        script = (
            f"{skip}waited=0; "
            'until nslookup "$MASTER_HOST" >/dev/null 2>&1; do '
            f'if [ "$waited" -ge {limit} ]; then '
            f'echo "workbench: master $MASTER_HOST did not resolve within {limit}s" >&2; exit 1; fi; '
            'echo "workbench: waiting for master $MASTER_HOST"; sleep 2; waited=$$((waited+2)); done'
        )
        env: list[dict[str, Any]] = [{"name": "MASTER_HOST", "value": master}]
        if skip_rank_zero is not None:
            env.append({"name": "WORKBENCH_RANK", "valueFrom": skip_rank_zero})
        return {
            "name": "wait-for-master",
            "image": self.options.wait_image,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", script],
            "env": env,
            "resources": {
                "requests": {"cpu": "10m", "memory": "16Mi"},
                "limits": {"memory": "32Mi"},
            },
        }

    def resources(self) -> dict[str, Any]:
        """Requests from the spec (or the instance spec), GPUs as nvidia.com/gpu limits."""
        cpu = self.spec.cpu if self.spec.cpu is not None else self.offer.cpu
        memory = self.spec.memory or self.offer.memory
        out: dict[str, Any] = {"requests": {"cpu": f"{cpu:g}", "memory": memory},
                               "limits": {"memory": memory}}  # fmt: skip
        if self.spec.gpus:
            out["limits"].update(gpu_limits(self.spec.gpus, self.offer, self.options.gpu_sharing))
        return out

    def pod_spec(self, container: str, env: list[dict[str, Any]], command: list[str],
                 init: list[dict[str, Any]], port_name: str) -> dict[str, Any]:  # fmt: skip
        """One worker's PodSpec."""
        user_env = [{"name": k, "value": v} for k, v in self.spec.env.items()
                    if k not in self.spec.secret_env()]  # fmt: skip
        main: dict[str, Any] = {
            "name": container,
            "image": self.image,
            "imagePullPolicy": "IfNotPresent",
            "command": self.wrap(command),
            "env": [*env, *user_env, *self.secret_env, *self.upload_env],
            "ports": [{"name": port_name, "containerPort": self.options.master_port}],
            "resources": self.resources(),
        }
        if self.mounts:
            main["volumeMounts"] = [dict(m) for m in self.mounts]
        if self.spec.working_dir:
            main["workingDir"] = self.spec.working_dir
        pod: dict[str, Any] = {
            # Service links put every Service's address into env: noise that can clash
            # with a script's own variables.
            "enableServiceLinks": False,
            "initContainers": [*init, *self.prefetch],
            "containers": [main],
        }
        if not pod["initContainers"]:
            del pod["initContainers"]
        if self.volumes:
            pod["volumes"] = [dict(v) for v in self.volumes]
        o = self.options
        if o.service_account:
            pod["serviceAccountName"] = o.service_account
        if o.image_pull_secrets:
            pod["imagePullSecrets"] = [{"name": s} for s in o.image_pull_secrets]
        if o.node_selector:
            pod["nodeSelector"] = dict(o.node_selector)
        if o.tolerations:
            pod["tolerations"] = [dict(t) for t in o.tolerations]
        if o.scheduler_name:
            pod["schedulerName"] = o.scheduler_name
        if self.spec.priority or o.priority_class:
            pod["priorityClassName"] = self.spec.priority or o.priority_class
        return pod
