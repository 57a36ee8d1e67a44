"""Kubeflow manifests in and out: a PyTorchJob, TFJob or MPIJob (kubeflow.org/v1) as it is
-> a TrainSpec that runs on any backend, and any job -> the manifest of a kind.

In (``workbench submit -f job.yaml``, ``workbench.from_manifest``):

* replicas -> ``workers`` (PyTorchJob: Master + Worker; TFJob: Worker; MPIJob: Worker,
  the Launcher's command run by worker 0, whose ``mpirun`` starts every process from the
  contract's hostfile); the training container's image, command + args (Kubernetes'
  ``$(VAR)`` references expanded from the container's env, as the kubelet does), env,
  workingDir and resources (``nvidia.com/gpu`` -> ``gpus``, cpu, memory);
  ``nprocPerNode`` / ``slotsPerWorker`` -> ``procs_per_worker``; ``runPolicy.backoffLimit``
  -> ``max_retries`` (absent: 0), ``activeDeadlineSeconds`` -> ``timeout``,
  ``schedulingPolicy.queue`` / ``priorityClass`` -> ``queue`` / ``priority``.
* ``elasticPolicy``: workbench runs a fixed world of ``Worker.replicas`` workers (no backend
  scales a running job), which must lie within ``minReplicas..maxReplicas``. The
  rendezvous settings reach torchrun as the operator passes them (``PET_RDZV_BACKEND``,
  ``PET_MAX_RESTARTS``, ``PET_RDZV_ID``, ``PET_RDZV_CONF``); the endpoint is the job's
  master (contract.py's ``PET_RDZV_ENDPOINT``) and ``PET_NNODES`` the fixed count.
* The variables the operator sets (MASTER_*, RANK, WORLD_SIZE, PET_*, TF_CONFIG) come from
  workbench.contract on every backend; a value the manifest gives for one of them is
  dropped, as the operator's own (appended later) wins on a cluster.
* Anything else is a SpecError naming its path (``spec.pytorchReplicaSpecs.Worker.template.
  spec.affinity``) and the fix. Cluster-only bookkeeping that changes nothing about what
  runs (labels, annotations, imagePullPolicy, ports, cleanPodPolicy, ttlSecondsAfterFinished,
  enableServiceLinks) is accepted and ignored.

An image that cannot be pulled here runs as local processes when ``image_map`` maps it to a
folder standing in for the image's filesystem: the working directory is that folder (joined
with the container's ``workingDir``), and an absolute path in the command that exists
under it is read from there.

Out (``workbench export``): :func:`export_yaml` renders a job's stored (redacted) spec with
``manifests.render_as``, the Secret masked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import contract
from ._spec_limits import read_spec_file, show
from .errors import SpecError
from .redaction import REDACTED
from .spec import RESERVED_ENV, JobRecord, TrainSpec

API_VERSION = "kubeflow.org/v1"
# kind -> (replica specs key, framework, replica types in order, the default container name)
MANIFEST_KINDS: dict[str, tuple[str, str, tuple[str, ...], str]] = {
    "PyTorchJob": ("pytorchReplicaSpecs", "pytorch", ("Master", "Worker"), "pytorch"),
    "TFJob": ("tfReplicaSpecs", "tensorflow", ("Worker",), "tensorflow"),
    "MPIJob": ("mpiReplicaSpecs", "mpi", ("Launcher", "Worker"), "mpi"),
}
# The operator's elasticPolicy fields -> the PET_* variable it sets from each.
ELASTIC_ENV = {"maxRestarts": "PET_MAX_RESTARTS", "rdzvId": "PET_RDZV_ID"}
# What workbench's own PyTorchJob renderer wraps a command in (manifests._kubeflow).
RANK_WRAPPER = ["sh", "-c", 'export WORKBENCH_RANK="$RANK"; exec "$0" "$@"']
# MPIJob: the Launcher's command runs on worker 0 only; the other workers stand in for the
# operator's sshd workers (mpirun on worker 0 starts their processes from the hostfile).
LAUNCHER_WRAPPER = ["sh", "-c", '[ "$WORKBENCH_RANK" = 0 ] || exit 0; exec "$0" "$@"']
_MAP_FIX = "map the image to a local folder that holds its files: --image-map IMAGE=DIR"
_PLACE_FIX = (
    "remove it: workbench places workers itself (on a cluster, set node_selector/"
    "tolerations per instance spec in the kubernetes config)"
)
_POD_FIXES = {
    "affinity": _PLACE_FIX,
    "nodeSelector": _PLACE_FIX,
    "tolerations": _PLACE_FIX,
    "nodeName": _PLACE_FIX,
    "volumes": "mount data with --data SRC:DST (oss://, s3://, pvc://, nas://) instead",
    "initContainers": "run the preparation in the command, or mount data with --data",
    "hostNetwork": "remove it: workers meet on the addresses workbench gives them",
}
_CONTAINER_FIXES = {
    "volumeMounts": "mount data with --data SRC:DST instead",
    "envFrom": "give each variable with --env NAME=VALUE",
}
_IGNORED_POD = {"restartPolicy", "enableServiceLinks", "terminationGracePeriodSeconds",
                "schedulerName", "serviceAccountName", "imagePullSecrets"}  # fmt: skip
_CONTAINER_KEYS = {"name", "image", "imagePullPolicy", "command", "args", "env", "resources",
                   "workingDir", "ports"}  # fmt: skip
# A replica's run -> the field's name in the manifest, for "differs from Master's".
_FIELD_NAMES = {"working_dir": "workingDir", "priority": "(pod).priorityClassName"}
# Kubernetes expands $(NAME) from the container's env in command and args; $$ escapes.
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def is_manifest(data: Any) -> bool:
    """True when ``data`` looks like a Kubernetes object (apiVersion + kind), not a spec."""
    return isinstance(data, dict) and "apiVersion" in data and "kind" in data


def load_spec_file(path: str | Path, image_map: Mapping[str, str] | None = None,
                   backend: str | None = None) -> TrainSpec:  # fmt: skip
    """A ``-f`` file: a Kubeflow manifest or a workbench spec (relative paths as from_yaml)."""
    return load_file(path, image_map, backend)[0]


def load_file(path: str | Path, image_map: Mapping[str, str] | None = None,
              backend: str | None = None) -> tuple[TrainSpec, bool]:  # fmt: skip
    """:func:`load_spec_file`, and whether the file was a Kubeflow manifest."""
    p = Path(path)
    data = read_spec_file(p)
    if is_manifest(data):
        return from_manifest(data, image_map=image_map, backend=backend), True
    if image_map:
        raise SpecError("image_map", "applies to Kubeflow manifests only",
                        f"{p} is a workbench spec: drop --image-map")  # fmt: skip
    return TrainSpec.from_dict(data, base_dir=p.parent.resolve()), False


def parse_image_map(items: list[str] | None) -> dict[str, str]:
    """``["IMAGE=DIR", ...]`` -> {image: dir}; a bad item is a SpecError naming it."""
    out: dict[str, str] = {}
    for item in items or []:
        image, sep, folder = item.partition("=")
        if not sep or not image or not folder:
            raise SpecError("image_map", f"{show(item)} is not IMAGE=DIR",
                            "e.g. --image-map kubeflow/pytorch-elastic-example-echo:latest=./echo")  # fmt: skip
        out[image] = folder
    return out


def from_manifest(manifest: Mapping[str, Any], image_map: Mapping[str, str] | None = None,
                  backend: str | None = None) -> TrainSpec:  # fmt: skip
    """The TrainSpec of a kubeflow.org/v1 PyTorchJob, TFJob or MPIJob (see the module doc)."""
    if not isinstance(manifest, Mapping):
        raise SpecError("manifest", f"must be a mapping, got {type(manifest).__name__}")
    _keys(manifest, "", {"apiVersion", "kind", "metadata", "spec", "status"})
    kind = manifest.get("kind")
    if kind not in MANIFEST_KINDS:
        raise SpecError("kind", f"{show(kind)} is not a Kubeflow training job",
                        f"use one of {', '.join(MANIFEST_KINDS)} (kubeflow.org/v1)")  # fmt: skip
    if manifest.get("apiVersion") != API_VERSION:
        raise SpecError("apiVersion", f"{show(manifest.get('apiVersion'))} is not {API_VERSION}",
                        f"write apiVersion: {API_VERSION}")  # fmt: skip
    replicas_key, framework, types, default_container = MANIFEST_KINDS[kind]
    meta = _mapping(manifest.get("metadata") or {}, "metadata")
    _keys(meta, "metadata", {"name", "namespace", "labels", "annotations", "generateName"})
    spec = _mapping(manifest.get("spec"), "spec")
    allowed = {replicas_key, "runPolicy"} | {
        "PyTorchJob": {"nprocPerNode", "elasticPolicy"},
        "TFJob": set(),
        "MPIJob": {"slotsPerWorker", "cleanPodPolicy", "mainContainer"},
    }[kind]
    _keys(spec, "spec", allowed)
    rpath = f"spec.{replicas_key}"
    replica_specs = _mapping(spec.get(replicas_key), rpath)
    if not replica_specs:
        raise SpecError(rpath, "has no replicas", "give at least a Worker")
    _keys(replica_specs, rpath, set(types), fixes=_replica_fixes(kind))
    container_name = spec.get("mainContainer") or default_container
    counts: dict[str, int] = {}
    runs: dict[str, dict[str, Any]] = {}
    for rtype in types:
        if rtype not in replica_specs:
            continue
        counts[rtype], runs[rtype] = _replica(replica_specs[rtype], f"{rpath}.{rtype}",
                                              container_name)  # fmt: skip
    data: dict[str, Any] = {"framework": framework}
    if kind == "MPIJob":
        if counts.get("Launcher", 0) != 1 or "Worker" not in counts:
            raise SpecError(rpath, "an MPIJob needs one Launcher and a Worker",
                            "give Launcher replicas: 1 and Worker replicas: N")  # fmt: skip
        run = dict(runs["Launcher"])
        run["command"] = [*LAUNCHER_WRAPPER, *run["command"]]
        # The GPUs are the workers' (the launcher only starts mpirun).
        run["resources"] = runs["Worker"]["resources"]
        data["workers"] = counts["Worker"]
        if "slotsPerWorker" in spec:
            data["procs_per_worker"] = _int(spec["slotsPerWorker"], "spec.slotsPerWorker", 1)
    else:
        first, *others = list(runs)
        if first == "Master" and counts["Master"] != 1:
            raise SpecError(f"{rpath}.Master.replicas", f"is {counts['Master']}",
                            "a PyTorchJob has one Master: put the others under Worker")  # fmt: skip
        run = runs[first]
        for other in others:
            for key, value in runs[other].items():
                if key != "path" and value != run[key]:
                    where = _FIELD_NAMES.get(key, key)
                    raise SpecError(f"{runs[other]['path']}.{where}", f"differs from {first}'s",
                                    "workbench runs one command on every worker: make them equal")  # fmt: skip
        data["workers"] = sum(counts.values())
    if data["workers"] < 1:
        raise SpecError(f"{rpath}.Worker.replicas", "is 0", "give 1 or more")
    env = dict(run["env"])
    if kind == "PyTorchJob":
        nproc = spec.get("nprocPerNode")
        if nproc is not None:
            data["procs_per_worker"] = _nproc(nproc)
        if spec.get("elasticPolicy") is not None:
            env.update(_elastic(spec["elasticPolicy"], data["workers"], data))
    data.update(_run_policy(spec.get("runPolicy")))
    data.update(run["resources"])
    name = meta.get("name")
    if name is not None:
        data["name"] = name
    data["image"] = run["image"]
    if run["priority"] and "priority" not in data:
        data["priority"] = run["priority"]
    data["env"] = env
    data["command"] = _command(run["command"], env, run["path"])
    if run["working_dir"]:
        data["working_dir"] = run["working_dir"]
    if backend == "kubernetes":  # the same kind, in the manifest's namespace
        data["backend_options"] = {"flavor": "kubeflow"}
        if meta.get("namespace"):
            data["backend_options"]["namespace"] = meta["namespace"]
    if backend is not None:
        data["backend"] = backend
    root = (image_map or {}).get(run["image"])
    if root is not None:
        _map_image(data, Path(root).expanduser().resolve())
    return TrainSpec.from_dict(data)


def check_runs_here(spec: TrainSpec, image_map: Mapping[str, str] | None = None) -> None:
    """For a manifest run as local processes: its working directory and script exist here;
    otherwise a SpecError that names the image that was not pulled and how to map it."""
    if spec.runtime == "container" or spec.image in (image_map or {}):
        return
    if spec.working_dir and not Path(spec.working_dir).is_dir():
        raise SpecError("image", f"{spec.image} cannot be pulled here and its workingDir "
                        f"{spec.working_dir} is not on this host", _MAP_FIX)  # fmt: skip
    for arg in spec.command:
        if arg.startswith("/") and arg.endswith((".py", ".sh")) and not Path(arg).exists():
            raise SpecError("image", f"{spec.image} cannot be pulled here and its script "
                            f"{arg} is not on this host", _MAP_FIX)  # fmt: skip


# ---- the walk --------------------------------------------------------------------------
def _mapping(node: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(node, Mapping):
        raise SpecError(path or "manifest", f"must be a mapping, got {show(node)}")
    return node


def _keys(node: Mapping[str, Any], path: str, allowed: set[str],
          fixes: Mapping[str, str] | None = None) -> None:  # fmt: skip
    for key in node:
        if key not in allowed:
            where = f"{path}.{key}" if path else str(key)
            fix = (fixes or {}).get(key) or "remove it: workbench cannot honour it on every backend"
            raise SpecError(where, "is not supported by workbench", fix)


def _replica_fixes(kind: str) -> dict[str, str]:
    if kind == "TFJob":
        fold = ("workbench runs worker-only TFJobs (MultiWorkerMirroredStrategy makes worker 0 "
                "the chief): fold it into Worker")  # fmt: skip
        return {
            "Chief": fold,
            "Master": fold,
            "PS": fold,
            "Evaluator": "run evaluation as its own job",
        }
    return {}


def _int(value: Any, path: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise SpecError(path, f"{show(value)} is not a whole number")
    try:
        out = int(value)
    except ValueError:
        raise SpecError(path, f"{show(value)} is not a whole number") from None
    if out < low:
        raise SpecError(path, f"must be {low} or more, got {out}")
    return out


def _nproc(value: Any) -> int | None:
    # torchrun's "auto"/"gpu": one process per GPU, else 1 -- the spec's own default.
    if isinstance(value, str) and value in ("auto", "gpu"):
        return None
    return _int(value, "spec.nprocPerNode", 1)


def _replica(node: Any, path: str, container_name: str) -> tuple[int, dict[str, Any]]:
    replica = _mapping(node, path)
    _keys(replica, path, {"replicas", "restartPolicy", "template"})
    count = _int(replica.get("replicas", 1), f"{path}.replicas")
    policy = replica.get("restartPolicy", "Never")
    if policy not in ("Never", "OnFailure", "ExitCode"):
        raise SpecError(f"{path}.restartPolicy", f"{show(policy)} is not supported",
                        "use Never, OnFailure or ExitCode (workbench restarts the whole gang "
                        "up to runPolicy.backoffLimit times)")  # fmt: skip
    template = _mapping(replica.get("template"), f"{path}.template")
    _keys(template, f"{path}.template", {"metadata", "spec"})
    tmeta = _mapping(template.get("metadata") or {}, f"{path}.template.metadata")
    _keys(tmeta, f"{path}.template.metadata", {"labels", "annotations", "name"})
    pod_path = f"{path}.template.spec"
    pod = _mapping(template.get("spec"), pod_path)
    allowed = _IGNORED_POD | {"containers", "initContainers", "priorityClassName"}
    _keys(pod, pod_path, allowed, fixes=_POD_FIXES)
    for i, init in enumerate(pod.get("initContainers") or []):
        # workbench's own renderer adds a wait for the master's DNS name: locally not needed
        if not (isinstance(init, Mapping) and init.get("name") == "wait-for-master"):
            raise SpecError(f"{pod_path}.initContainers[{i}]", "is not supported by workbench",
                            _POD_FIXES["initContainers"])  # fmt: skip
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise SpecError(f"{pod_path}.containers", "must list the training container")
    if len(containers) > 1:
        main = [c for c in containers if isinstance(c, Mapping) and c.get("name") == container_name]
        extra = next(i for i, c in enumerate(containers) if not main or c is not main[0])
        raise SpecError(f"{pod_path}.containers[{extra}]", "sidecar containers are not supported",
                        f"keep only the training container ({container_name!r})")  # fmt: skip
    cpath = f"{pod_path}.containers[0]"
    c = _mapping(containers[0], cpath)
    _keys(c, cpath, _CONTAINER_KEYS, fixes=_CONTAINER_FIXES)
    if not isinstance(c.get("image"), str) or not c["image"]:
        raise SpecError(f"{cpath}.image", "is required", "name the image the container runs")
    command = list(c.get("command") or []) + list(c.get("args") or [])
    if not command:
        raise SpecError(f"{cpath}.command", "is missing, so the image's entrypoint would run",
                        "write the command out: workbench cannot read an image's entrypoint")  # fmt: skip
    if not all(isinstance(a, (str, int, float)) for a in command):
        raise SpecError(f"{cpath}.command", "must be a list of strings")
    return count, {
        "path": cpath,
        "image": c["image"],
        "command": [str(a) for a in command],
        "env": _env(c.get("env") or [], f"{cpath}.env"),
        "resources": _resources(c.get("resources") or {}, cpath),
        "working_dir": c.get("workingDir"),
        "priority": pod.get("priorityClassName"),
    }


def _env(items: Any, path: str) -> dict[str, str]:
    if not isinstance(items, list):
        raise SpecError(path, "must be a list of {name, value}")
    set_here = _contract_names()
    out: dict[str, str] = {}
    for i, item in enumerate(items):
        item = _mapping(item, f"{path}[{i}]")
        _keys(item, f"{path}[{i}]", {"name", "value"}, fixes={
            "valueFrom": "give the value itself (--env NAME=VALUE); workbench keeps "
                         "credential-looking values in a Secret on a cluster"})  # fmt: skip
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise SpecError(f"{path}[{i}].name", "is required")
        if name not in set_here:  # the contract sets it on every backend, as the operator does
            out[name] = str(item.get("value", ""))
    return out


def _contract_names() -> set[str]:
    world = contract.World(1, 1, "h", 1, ("h",), (1,))
    names = set(RESERVED_ENV) | set(contract.pytorch_process_env(world, 0, 0))
    for framework in ("pytorch", "tensorflow", "mpi"):
        names |= set(contract.worker_env(framework, world, 0, "x", 1, "/x", "/x/hostfile"))
    return names


def _elastic(node: Any, workers: int, data: dict[str, Any]) -> dict[str, str]:
    path = "spec.elasticPolicy"
    policy = _mapping(node, path)
    fixed = "workbench's rendezvous endpoint is the job's master: remove it"
    _keys(policy, path, {"minReplicas", "maxReplicas", "maxRestarts", "rdzvBackend", "rdzvId",
                         "rdzvConf", "nProcPerNode"},
          fixes={"rdzvHost": fixed, "rdzvPort": fixed,
                 "metrics": "remove it: workbench does not scale a running job"})  # fmt: skip
    low = _int(policy.get("minReplicas", workers), f"{path}.minReplicas", 1)
    high = _int(policy.get("maxReplicas", workers), f"{path}.maxReplicas", 1)
    if not low <= workers <= high:
        raise SpecError(f"{path}.minReplicas", f"{low}..{high} does not hold the {workers} "
                        "worker(s) workbench starts (a fixed world of the replicas)",
                        "give Worker replicas within minReplicas..maxReplicas")  # fmt: skip
    backend = policy.get("rdzvBackend", "c10d")
    if backend != "c10d":
        raise SpecError(f"{path}.rdzvBackend", f"{show(backend)} needs a server workbench "
                        "does not run", "use c10d (the job's master hosts the rendezvous)")  # fmt: skip
    env = {"PET_RDZV_BACKEND": backend}
    for key, var in ELASTIC_ENV.items():
        if key in policy:
            env[var] = str(_int(policy[key], f"{path}.{key}") if key == "maxRestarts"
                           else policy[key])  # fmt: skip
    conf = policy.get("rdzvConf")
    if conf:
        if not isinstance(conf, list) or not all(isinstance(c, Mapping) for c in conf):
            raise SpecError(f"{path}.rdzvConf", "must be a list of {key, value}")
        env["PET_RDZV_CONF"] = ",".join(f"{c.get('key')}={c.get('value')}" for c in conf)
    if "nProcPerNode" in policy:
        data["procs_per_worker"] = _int(policy["nProcPerNode"], f"{path}.nProcPerNode", 1)
    return env


def _run_policy(node: Any) -> dict[str, Any]:
    if node is None:
        return {}
    path = "spec.runPolicy"
    policy = _mapping(node, path)
    _keys(policy, path, {"backoffLimit", "activeDeadlineSeconds", "cleanPodPolicy",
                         "ttlSecondsAfterFinished", "schedulingPolicy", "suspend", "managedBy"})  # fmt: skip
    out: dict[str, Any] = {}
    if policy.get("backoffLimit") is not None:
        out["max_retries"] = _int(policy["backoffLimit"], f"{path}.backoffLimit")
    if policy.get("activeDeadlineSeconds") is not None:
        out["timeout"] = _int(policy["activeDeadlineSeconds"], f"{path}.activeDeadlineSeconds", 1)
    if policy.get("suspend"):
        raise SpecError(f"{path}.suspend", "is true: the job would never start",
                        "remove it (workbench queues jobs while resources are busy)")  # fmt: skip
    if policy.get("schedulingPolicy") is not None:
        sp = _mapping(policy["schedulingPolicy"], f"{path}.schedulingPolicy")
        _keys(sp, f"{path}.schedulingPolicy", {"queue", "priorityClass", "minAvailable",
                                               "scheduleTimeoutSeconds", "minResources"})  # fmt: skip
        if sp.get("queue"):
            out["queue"] = sp["queue"]
        if sp.get("priorityClass"):
            out["priority"] = sp["priorityClass"]
    return out


def _resources(node: Any, path: str) -> dict[str, Any]:
    path = f"{path}.resources"
    res = _mapping(node, path)
    _keys(res, path, {"limits", "requests"})
    out: dict[str, Any] = {}
    merged: dict[str, tuple[str, Any]] = {}
    for part in ("requests", "limits"):  # a limit is what the container may use: it wins
        values = _mapping(res.get(part) or {}, f"{path}.{part}")
        for key, value in values.items():
            merged[key] = (f"{path}.{part}.{key}", value)
    for key, (where, value) in merged.items():
        if key == "nvidia.com/gpu":
            out["gpus"] = _int(value, where)
        elif key == "cpu":
            text = str(value)
            try:
                out["cpu"] = int(text[:-1]) / 1000 if text.endswith("m") else float(text)
            except ValueError:
                raise SpecError(
                    where, f"{show(value)} is not a CPU quantity", "e.g. 4 or 500m"
                ) from None
        elif key == "memory":
            out["memory"] = str(value)
        else:
            raise SpecError(where, "is a resource workbench does not schedule",
                            "use nvidia.com/gpu, cpu and memory")  # fmt: skip
    return out


def _command(argv: list[str], env: Mapping[str, str], path: str) -> list[str]:
    if argv[: len(RANK_WRAPPER)] == RANK_WRAPPER and len(argv) > len(RANK_WRAPPER):
        argv = argv[len(RANK_WRAPPER) :]  # workbench's own wrapper: the contract sets both

    def expand(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env[name] if name in env else m.group(0)

    return [_VAR_REF.sub(expand, arg) for arg in argv]


def _map_image(data: dict[str, Any], root: Path) -> None:
    """Run the image's command from ``root``, the local stand-in for its filesystem."""
    if not root.is_dir():
        raise SpecError("image_map", f"{root} (for {data['image']}) is not a folder",
                        "give the folder that stands in for the image's files")  # fmt: skip
    workdir = data.get("working_dir")
    data["working_dir"] = str(root / workdir.lstrip("/")) if workdir else str(root)
    data["command"] = [str(root / a.lstrip("/")) if a.startswith("/") and (root / a.lstrip("/")).exists()
                       else a for a in data["command"]]  # fmt: skip
    data["runtime"] = "process"


# ---- out ---------------------------------------------------------------------------------
def export_yaml(record: JobRecord, kind: str, catalog: Any, kube_section: Mapping[str, Any]) -> str:
    """The manifests of ``kind`` for job ``record`` (any backend), as YAML; the Secret, if
    any, masked, and credentials never in the text (the stored spec is redacted)."""
    from .backends.kubernetes.manifests import ClusterOptions, render_as

    spec = TrainSpec.from_dict(dict(record.spec))
    spec.name = record.name
    spec.backend = None
    spec.backend_options = {}
    spec.runtime = "auto"
    spec.validate(catalog)
    # The store keeps credentials masked; a stand-in that still reads as a credential makes
    # the renderer reference the Secret for it (whose values are masked when shown).
    spec.env = {k: "redacted-by-workbench" if v == REDACTED else v for k, v in spec.env.items()}
    stored = record.spec.get("backend_options") or {}  # a cluster job's own namespace first
    namespace = stored.get("namespace") or (kube_section or {}).get("namespace") or "default"
    options = ClusterOptions(namespace=str(namespace))
    offer = catalog.spec(spec.instance_spec or "")
    return render_as(spec, offer, spec.image_ref(catalog), options, kind).to_yaml()
