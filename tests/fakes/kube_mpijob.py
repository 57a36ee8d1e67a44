"""An in-process MPIJob (kubeflow.org/v1) controller for the fake cluster, after Kubeflow's
training-operator v1.9 (pkg/controller.v1/mpi: mpijob.go, mpijob_controller.go; learned
from the source, not copied):

* the ConfigMap ``JOB-config``: ``hostfile`` (``JOB-worker-i slots=N``, one line per
  worker), ``kubexec.sh`` (``/opt/kube/kubectl exec POD -- /bin/sh -c "$*"``, Open MPI's
  rsh agent) and ``discover_hosts.sh``;
* worker pods ``JOB-worker-i`` (``sleep 365d`` when the template has no command) with
  ``kubexec.sh`` mounted at /etc/mpi;
* the launcher pod ``JOB-launcher``: the ``kubectl-delivery`` init container puts kubectl
  into /opt/kube, and the main container gets the ConfigMap at /etc/mpi and
  OMPI_MCA_plm_rsh_agent, OMPI_MCA_orte_default_hostfile, I_MPI_HYDRA_BOOTSTRAP(_EXEC),
  NVIDIA_VISIBLE_DEVICES / NVIDIA_DRIVER_CAPABILITIES (empty: a launcher without GPUs);
* status: Running once the launcher and every worker run, Succeeded / Failed with the
  launcher (a failed worker fails the job too); with ``cleanPodPolicy: Running`` the pods
  still running when it ends (the sleeping workers) are deleted.

The fake kubelet plays the images: ``kubectl-delivery`` is kube_kubectl.py's ``deliver``
(copy a kubectl, wait until every host of the hostfile runs), and that kubectl's
``exec`` runs the command as a local process with the worker container's env, as the
real ``kubectl exec`` does inside the container. Open MPI on this node talks over
loopback only ($HOME/.openmpi/mca-params.conf, written by :func:`prepare_node`).
"""

from __future__ import annotations

import contextlib
import copy
import sys
from pathlib import Path
from typing import Any

from .kube_apiserver import KUBELET_FINALIZER
from .kube_state import ApiError, ClusterState, now_rfc3339

PODS = ("", "v1", "pods")
CONFIGMAPS = ("", "v1", "configmaps")
MPIJOBS = ("kubeflow.org", "v1", "mpijobs")
L_JOB, L_TYPE, L_INDEX, L_OPERATOR, L_ROLE = (
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index",
    "training.kubeflow.org/operator-name",
    "training.kubeflow.org/job-role",
)
CONFIG_DIR, KUBECTL_DIR = "/etc/mpi", "/opt/kube"
CONFIG_VOLUME, KUBECTL_VOLUME = "mpi-job-config", "mpi-job-kubectl"
DELIVERY_IMAGE = "kubeflow/kubectl-delivery:latest"  # the operator's default
KUBECTL = Path(__file__).with_name("kube_kubectl.py")


def config_map(job: dict[str, Any], running_workers: list[str]) -> dict[str, Any]:
    """The ConfigMap the operator writes for ``job``."""
    meta, spec = job["metadata"], job["spec"]
    slots = int(spec.get("slotsPerWorker") or 1)
    workers = int((spec["mpiReplicaSpecs"].get("Worker") or {}).get("replicas", 0))
    kubexec = f"#!/bin/sh\nset -x\nPOD_NAME=$1\nshift\n{KUBECTL_DIR}/kubectl exec ${{POD_NAME}}"
    if spec.get("mainContainer"):
        kubexec += f" --container {spec['mainContainer']}"
    kubexec += ' -- /bin/sh -c "$*"'
    hostfile = "".join(f"{meta['name']}-worker-{i} slots={slots}\n" for i in range(workers))
    discover = "#!/bin/sh" + "".join(f"\necho {p}:{slots}" for p in sorted(running_workers))
    return {
        "metadata": {"name": f"{meta['name']}-config", "labels": {"app": meta["name"]},
                     "ownerReferences": _owner(job)},
        "data": {"hostfile": hostfile, "kubexec.sh": kubexec, "discover_hosts.sh": discover},
    }  # fmt: skip


def entrypoint(image: str, workdir: Path) -> list[str] | None:
    """The command of an image the fake kubelet knows, for a container without one."""
    if image.split(":")[0].endswith("kubectl-delivery"):
        return [sys.executable, str(KUBECTL), "deliver", "--registry", str(workdir / "exec"),
                "--hostfile", f"{CONFIG_DIR}/hostfile"]  # fmt: skip
    return None


def prepare_node(workdir: Path) -> None:
    """Open MPI's per-user settings on the fake node ($HOME is the workdir): its daemons
    and ranks talk over loopback only, as every process here does."""
    conf = workdir / ".openmpi"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "mca-params.conf").write_text(
        "oob_tcp_if_include = lo\nbtl_tcp_if_include = lo\nbtl = self,tcp\n"
    )


def reconcile_mpijobs(state: ClusterState) -> None:
    """Create the ConfigMap, workers and launcher of each MPIJob; write its status."""
    for job in state.list(MPIJOBS, None)[0]:
        meta = job["metadata"]
        status = job.get("status") or {}
        conditions = status.get("conditions") or []
        if meta.get("deletionTimestamp") or any(
            c["type"] in ("Succeeded", "Failed") and c.get("status") == "True" for c in conditions
        ):
            continue
        ns, name = meta["namespace"], meta["name"]
        pods = {p["metadata"]["name"]: p for p in state.list(PODS, ns, f"{L_JOB}={name}")[0]}
        replicas = job["spec"]["mpiReplicaSpecs"]
        workers = int((replicas.get("Worker") or {}).get("replicas", 0))
        running = [n for n, p in pods.items() if _phase(p) == "Running"
                   and (p["metadata"].get("labels") or {}).get(L_TYPE) == "worker"]  # fmt: skip
        cm = config_map(job, running)
        try:
            current = state.get(CONFIGMAPS, ns, cm["metadata"]["name"])
            if current.get("data") != cm["data"]:
                state.patch(CONFIGMAPS, ns, cm["metadata"]["name"], {"data": cm["data"]})
        except ApiError:
            state.create(CONFIGMAPS, ns, cm)
        for i in range(workers):
            if f"{name}-worker-{i}" not in pods:
                _create_worker(state, job, i)
        launcher = pods.get(f"{name}-launcher")
        if launcher is None:
            _create_launcher(state, job)
        lphase = _phase(launcher) if launcher else "Pending"
        wphases = [_phase(pods[f"{name}-worker-{i}"]) if f"{name}-worker-{i}" in pods
                   else "Pending" for i in range(workers)]  # fmt: skip
        new = list(conditions)
        types = [c["type"] for c in new]
        if "Created" not in types:
            new.append(_cond("Created", "MPIJobCreated", f"MPIJob {ns}/{name} is created."))
        if lphase == "Running" and all(p == "Running" for p in wphases) and "Running" not in types:
            new.append(_cond("Running", "MPIJobRunning", f"MPIJob {ns}/{name} is running."))
        done = True
        if lphase == "Succeeded":
            new.append(_cond("Succeeded", "MPIJobSucceeded",
                             f"MPIJob {ns}/{name} successfully completed."))  # fmt: skip
        elif lphase == "Failed":
            reason = ((launcher or {}).get("status") or {}).get("reason") or "MPIJobFailed"
            new.append(_cond("Failed", reason, f"MPIJob {ns}/{name} has failed"))
        elif "Failed" in wphases:
            n = wphases.count("Failed")
            new.append(_cond("Failed", "MPIJobFailed",
                             f"MPIJob {name} is failed because {n} Worker replica(s) failed."))  # fmt: skip
        else:
            done = False
        policy = (job["spec"].get("runPolicy") or {}).get("cleanPodPolicy") or "None"
        if done and policy in ("Running", "All"):
            for pod in state.list(PODS, ns, f"{L_JOB}={name}")[0]:
                if policy == "All" or _phase(pod) in ("Pending", "Running"):
                    with contextlib.suppress(ApiError):
                        state.delete(PODS, ns, pod["metadata"]["name"])
        counts = {"Launcher": _tally([lphase]), "Worker": _tally(wphases)}
        new_status = {"conditions": new, "replicaStatuses": counts,
                      "startTime": status.get("startTime") or now_rfc3339()}  # fmt: skip
        if {k: status.get(k) for k in new_status} != new_status:
            state.patch(MPIJOBS, ns, name, {"status": new_status}, subresource="status")


def _create_worker(state: ClusterState, job: dict[str, Any], index: int) -> None:
    tmpl = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]
    spec = copy.deepcopy(tmpl.get("spec") or {})
    main = spec["containers"][0]
    if not main.get("command"):
        main["command"], main["args"] = ["sleep"], ["365d"]
    # Open MPI looks for the rsh agent's path on every node.
    main["volumeMounts"] = [*main.get("volumeMounts", []),
                            {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR}]  # fmt: skip
    spec["volumes"] = [*spec.get("volumes", []), _config_volume(job, ["kubexec.sh"])]
    spec["restartPolicy"] = "Never"
    _create_pod(state, job, f"{job['metadata']['name']}-worker-{index}", tmpl, spec,
                {L_TYPE: "worker", L_INDEX: str(index)})  # fmt: skip


def _create_launcher(state: ClusterState, job: dict[str, Any]) -> None:
    name = job["metadata"]["name"]
    tmpl = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]
    spec = copy.deepcopy(tmpl.get("spec") or {})
    spec.setdefault("serviceAccountName", f"{name}-launcher")
    both = [{"name": KUBECTL_VOLUME, "mountPath": KUBECTL_DIR},
            {"name": CONFIG_VOLUME, "mountPath": CONFIG_DIR}]  # fmt: skip
    spec["initContainers"] = [*spec.get("initContainers", []), {
        "name": "kubectl-delivery", "image": DELIVERY_IMAGE, "imagePullPolicy": "IfNotPresent",
        "env": [{"name": "TARGET_DIR", "value": KUBECTL_DIR},
                {"name": "NAMESPACE", "value": job["metadata"]["namespace"]}],
        "volumeMounts": copy.deepcopy(both),
    }]  # fmt: skip
    main = spec["containers"][0]
    env = main.get("env", [])
    env += [{"name": "OMPI_MCA_plm_rsh_agent", "value": f"{CONFIG_DIR}/kubexec.sh"},
            {"name": "OMPI_MCA_orte_default_hostfile", "value": f"{CONFIG_DIR}/hostfile"}]  # fmt: skip
    gpu = any("gpu" in k for c in spec["containers"]
              for k in ((c.get("resources") or {}).get("limits") or {}))  # fmt: skip
    if not gpu:
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": ""},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": ""}]  # fmt: skip
    names = {e["name"] for e in env}
    if "I_MPI_HYDRA_BOOTSTRAP" not in names:
        env.append({"name": "I_MPI_HYDRA_BOOTSTRAP", "value": "rsh"})
    if "I_MPI_HYDRA_BOOTSTRAP_EXEC" not in names:
        env.append({"name": "I_MPI_HYDRA_BOOTSTRAP_EXEC", "value": f"{CONFIG_DIR}/kubexec.sh"})
    main["env"] = env
    main["volumeMounts"] = [*main.get("volumeMounts", []), *both]
    spec["volumes"] = [*spec.get("volumes", []), {"name": KUBECTL_VOLUME, "emptyDir": {}},
                       _config_volume(job, ["kubexec.sh", "hostfile", "discover_hosts.sh"])]  # fmt: skip
    spec["restartPolicy"] = "Never"
    _create_pod(state, job, f"{name}-launcher", tmpl, spec,
                {L_TYPE: "launcher", L_ROLE: "master"})  # fmt: skip


def _config_volume(job: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    modes = {"hostfile": 0o444}
    return {"name": CONFIG_VOLUME, "configMap": {
        "name": f"{job['metadata']['name']}-config",
        "items": [{"key": k, "path": k, "mode": modes.get(k, 0o555)} for k in keys]}}  # fmt: skip


def _create_pod(state: ClusterState, job: dict[str, Any], name: str, tmpl: dict[str, Any],
                spec: dict[str, Any], extra: dict[str, str]) -> None:  # fmt: skip
    meta = job["metadata"]
    labels = {**(tmpl.get("metadata") or {}).get("labels", {}), L_JOB: meta["name"],
              L_OPERATOR: "mpijob-controller", **extra}  # fmt: skip
    state.create(PODS, meta["namespace"], {
        "metadata": {"name": name, "labels": labels, "ownerReferences": _owner(job),
                     "finalizers": [KUBELET_FINALIZER]},
        "spec": spec,
    })  # fmt: skip


def _owner(job: dict[str, Any]) -> list[dict[str, Any]]:
    meta = job["metadata"]
    return [{"apiVersion": "kubeflow.org/v1", "kind": "MPIJob", "name": meta["name"],
             "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]  # fmt: skip


def _phase(pod: dict[str, Any] | None) -> str:
    return ((pod or {}).get("status") or {}).get("phase", "Pending")


def _tally(phases: list[str]) -> dict[str, int]:
    return {"active": sum(p in ("Pending", "Running") for p in phases),
            "succeeded": phases.count("Succeeded"), "failed": phases.count("Failed")}  # fmt: skip


def _cond(kind: str, reason: str, message: str) -> dict[str, Any]:
    now = now_rfc3339()
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": now, "lastTransitionTime": now}  # fmt: skip
