"""Flavour ``kubeflow``: kubeflow.org/v1 PyTorchJob, TFJob and MPIJob manifests (pure dicts).

The kind follows ``spec.framework`` (pytorch/plain -> PyTorchJob, tensorflow -> TFJob,
mpi -> MPIJob). What the training-operator v1.9 sets itself (learned from
pkg/controller.v1/{pytorch,tensorflow,mpi}, not copied) is left to it, so no variable is
set twice; workbench adds the rest of the env contract (workbench.contract):

* PyTorchJob: Master + Worker replicas; the operator sets MASTER_ADDR/PORT, WORLD_SIZE,
  RANK and PET_*. Ranks: Master 0, Worker i -> i + 1.
* TFJob: Chief + Worker replicas, container ``tensorflow`` with the port ``tfjob-port``;
  the operator sets TF_CONFIG (``{"cluster": {"chief": [...], "worker": [...]}, "task":
  {"type", "index"}, "environment": "cloud"}``, hosts ``JOB-TYPE-I.NS.svc:PORT``). Ranks:
  Chief 0, Worker i -> i + 1.
* MPIJob: a Launcher that runs ``mpirun`` and ``workers`` Worker pods with
  ``slotsPerWorker`` = processes per worker. The operator writes the hostfile
  (``JOB-worker-i slots=N``) into the ConfigMap ``JOB-config`` mounted at /etc/mpi, and
  gives the launcher OMPI_MCA_plm_rsh_agent (its kubectl-exec script) and
  OMPI_MCA_orte_default_hostfile; workers sleep until mpirun starts the ranks on them
  through ``kubectl exec``. Ranks: Worker i -> i; the launcher's log carries every rank's
  output and its exit code is the world's.
"""

from __future__ import annotations

import copy
import math
import posixpath
from typing import TYPE_CHECKING, Any

from ...contract import World, worker_env

if TYPE_CHECKING:
    from ...spec import TrainSpec
    from .manifests import ClusterOptions, _PodBuilder

API_VERSION = "kubeflow.org/v1"
# framework -> kind; the plural each kind is served under.
KINDS = {"pytorch": "PyTorchJob", "plain": "PyTorchJob", "tensorflow": "TFJob", "mpi": "MPIJob"}
PLURALS = {"PyTorchJob": "pytorchjobs", "TFJob": "tfjobs", "MPIJob": "mpijobs"}
REPLICA_SPECS = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs",
                 "MPIJob": "mpiReplicaSpecs"}  # fmt: skip
# Variables the training-operator sets on every PyTorchJob pod: workbench must not repeat
# them (a duplicate name hides the first, and the API server warns about it).
KUBEFLOW_SETS = frozenset(
    {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PET_NODE_RANK", "PET_NNODES",
     "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT", "PYTHONUNBUFFERED"}
)  # fmt: skip
TF_PORT = 2222  # the operator's default tfjob-port
# The operator's MPIJob launcher variables and where it mounts its ConfigMap.
MPI_CONFIG_DIR = "/etc/mpi"
MPI_HOSTFILE = f"{MPI_CONFIG_DIR}/hostfile"
MPI_SETS = frozenset({"OMPI_MCA_orte_default_hostfile", "OMPI_MCA_plm_rsh_agent"})
# Images run as root; Open MPI's mpirun refuses root without these (MPICH ignores them).
MPI_AS_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun")  # a command that starts its own world
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
RANK_DEPENDENT = ("RANK", "PET_NODE_RANK", "WORKBENCH_RANK")


def kind_of(framework: str | None) -> str:
    """The kubeflow.org/v1 kind of a job of ``framework``."""
    return KINDS.get(framework or "pytorch", "PyTorchJob")


def replica_templates(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """Every pod template of a Kubeflow workload (empty for other kinds)."""
    key = REPLICA_SPECS.get(workload.get("kind", ""))
    specs = ((workload.get("spec") or {}).get(key or "") or {}) if key else {}
    return [r["template"] for r in specs.values() if "template" in r]


def render_kubeflow(spec: TrainSpec, options: ClusterOptions, builder: _PodBuilder,
                    labels: dict[str, str]) -> list[dict[str, Any]]:  # fmt: skip
    """The PyTorchJob, TFJob or MPIJob of ``spec`` (by its framework)."""
    kind = kind_of(spec.framework)
    render = {"TFJob": _tfjob, "MPIJob": _mpijob}.get(kind, _pytorchjob)
    # Replicas share the builder's env entries: a deep copy keeps them apart (an edit of
    # one template, e.g. a retry's WORKBENCH_ATTEMPT, must not reach another by alias).
    return [copy.deepcopy(render(spec, options, builder, labels))]


def _meta(name: str, options: ClusterOptions, labels: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "namespace": options.namespace, "labels": dict(labels)}


def _run_policy(spec: TrainSpec, options: ClusterOptions, clean: str) -> dict[str, Any]:
    policy: dict[str, Any] = {"cleanPodPolicy": clean, "backoffLimit": spec.max_retries}
    if spec.timeout:
        policy["activeDeadlineSeconds"] = math.ceil(spec.timeout)
    if options.ttl_seconds_after_finished is not None:
        policy["ttlSecondsAfterFinished"] = options.ttl_seconds_after_finished
    return policy


def _replica(pod: dict[str, Any], count: int, labels: dict[str, str]) -> dict[str, Any]:
    pod["restartPolicy"] = "Never"
    return {"replicas": count, "restartPolicy": "Never",
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod}}  # fmt: skip


def _workload(kind: str, spec: TrainSpec, options: ClusterOptions, labels: dict[str, str],
              body: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    return {"apiVersion": API_VERSION, "kind": kind,
            "metadata": _meta(spec.name or "", options, labels), "spec": body}  # fmt: skip


def _pytorchjob(spec: TrainSpec, options: ClusterOptions, builder: _PodBuilder,
                labels: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    name = spec.name or ""
    master = f"{name}-master-0"  # the operator's replicaName(job, Master, 0)
    world = World(spec.workers, spec.procs_per_worker or 1, master, options.master_port,
                  (master,), (options.master_port,))  # fmt: skip
    contract = worker_env(spec.framework or "pytorch", world, 0, name)
    env = [{"name": k, "value": v} for k, v in contract.items()
           if k not in KUBEFLOW_SETS and k not in RANK_DEPENDENT]  # fmt: skip
    # The operator sets RANK per pod; one template serves every worker, so the shell
    # copies it into the contract's WORKBENCH_RANK before it runs the command.
    command = ["sh", "-c", 'export WORKBENCH_RANK="$RANK"; exec "$0" "$@"', *builder.args()]

    def replica(count: int, init: list[dict[str, Any]]) -> dict[str, Any]:
        pod = builder.pod_spec("pytorch", env, command, init, port_name="pytorchjob-port")
        return _replica(pod, count, labels)

    replicas = {"Master": replica(1, [])}
    if spec.workers > 1:
        replicas["Worker"] = replica(spec.workers - 1, [builder.wait_for_master(master)])
    return _workload("PyTorchJob", spec, options, labels, {
        "nprocPerNode": str(spec.procs_per_worker or 1),
        "runPolicy": _run_policy(spec, options, "None"),
        "pytorchReplicaSpecs": replicas,
    })  # fmt: skip


def _tfjob(spec: TrainSpec, options: ClusterOptions, builder: _PodBuilder,
           labels: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    name = spec.name or ""
    chief = f"{name}-chief-0"
    hosts = tuple(f"{name}-{t}-{i}.{options.namespace}.svc" for t, i in _tf_tasks(spec.workers))
    world = World(spec.workers, spec.procs_per_worker or 1, hosts[0], TF_PORT, hosts,
                  (TF_PORT,) * spec.workers)  # fmt: skip
    contract = worker_env("tensorflow", world, 0, name)
    # TF_CONFIG is the operator's (per pod); the rank is the Chief's 0 or the Worker
    # replica's index + 1, which the shell works out from the pod's own label.
    env = [{"name": k, "value": v} for k, v in contract.items()
           if k not in ("TF_CONFIG", "WORKBENCH_RANK")]  # fmt: skip
    chief_env: list[dict[str, Any]] = [*env, {"name": "WORKBENCH_RANK", "value": "0"}]
    index_ref = {"fieldRef": {"fieldPath": f"metadata.labels['{REPLICA_INDEX_LABEL}']"}}
    worker_env_: list[dict[str, Any]] = [
        *env,
        {"name": "WORKBENCH_REPLICA_INDEX", "valueFrom": index_ref},
    ]
    # $$ is Kubernetes' escape for $ (it would read $(...) as a variable).
    worker_cmd = ["sh", "-c", 'export WORKBENCH_RANK=$$((WORKBENCH_REPLICA_INDEX + 1)); '
                  'exec "$0" "$@"', *builder.args()]  # fmt: skip

    def pod(env: list[dict[str, Any]], command: list[str],
            init: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
        p = builder.pod_spec("tensorflow", env, command, init, port_name="tfjob-port")
        p["containers"][0]["ports"][0]["containerPort"] = TF_PORT
        return p

    replicas = {"Chief": _replica(pod(chief_env, builder.args(), []), 1, labels)}
    if spec.workers > 1:
        wait = [builder.wait_for_master(chief)]
        replicas["Worker"] = _replica(pod(worker_env_, worker_cmd, wait), spec.workers - 1, labels)
    return _workload("TFJob", spec, options, labels, {
        "runPolicy": _run_policy(spec, options, "None"),
        "tfReplicaSpecs": replicas,
    })  # fmt: skip


def _tf_tasks(workers: int) -> list[tuple[str, int]]:
    """(replica type, index) of each rank: the Chief, then the Workers."""
    return [("chief", 0), *(("worker", i) for i in range(workers - 1))]


def _mpijob(spec: TrainSpec, options: ClusterOptions, builder: _PodBuilder,
            labels: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    name = spec.name or ""
    slots = spec.procs_per_worker or 1
    hosts = tuple(f"{name}-worker-{i}" for i in range(spec.workers))
    world = World(spec.workers, slots, hosts[0], 0, hosts, (0,) * spec.workers)
    contract = worker_env("mpi", world, 0, name, hostfile=MPI_HOSTFILE)
    env = [{"name": k, "value": v} for k, v in contract.items()
           if k not in MPI_SETS and k != "WORKBENCH_RANK"]  # fmt: skip
    # Ranks run in the worker pods (mpirun reaches them through kubectl exec, which
    # gives a process the container's env): the worker's rank is its replica index.
    index_ref = {"fieldRef": {"fieldPath": f"metadata.labels['{REPLICA_INDEX_LABEL}']"}}
    worker = builder.pod_spec("mpi", [*env, {"name": "WORKBENCH_RANK", "valueFrom": index_ref}],
                              [], [], port_name="mpi")  # fmt: skip
    main = worker["containers"][0]
    del main["command"]  # the operator runs `sleep 365d` in a worker without a command
    del main["ports"]  # ranks meet on ports MPI picks
    argv = builder.args()
    if not spec.command or posixpath.basename(spec.command[0]) not in MPI_LAUNCHERS:
        argv = ["mpirun", "-np", str(world.world_size), *argv]
    launcher = builder.pod_spec(
        "mpi",
        [*env, *({"name": k, "value": v} for k, v in MPI_AS_ROOT.items())],
        argv,
        [],
        port_name="mpi",
    )
    lmain = launcher["containers"][0]
    del lmain["ports"]
    # The launcher only runs mpirun: no GPUs, no data (the ranks run on the workers).
    lmain["resources"] = {"requests": {"cpu": "250m", "memory": "256Mi"},
                          "limits": {"memory": "1Gi"}}  # fmt: skip
    for key in ("initContainers", "volumes"):
        launcher.pop(key, None)
    lmain.pop("volumeMounts", None)
    return _workload("MPIJob", spec, options, labels, {
        "slotsPerWorker": slots,
        # Workers sleep until mpirun uses them: once the launcher ends they are deleted.
        "runPolicy": _run_policy(spec, options, "Running"),
        "mpiReplicaSpecs": {
            "Launcher": _replica(launcher, 1, labels),
            "Worker": _replica(worker, spec.workers, labels),
        },
    })  # fmt: skip
