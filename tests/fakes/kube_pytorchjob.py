"""An in-process PyTorchJob controller for the fake cluster, after Kubeflow's
training-operator v1.9 (pkg/controller.v1/pytorch: envvar.go, master.go; learned from the
source, not copied): one pod and one headless Service per replica, named
``JOB-master-0`` / ``JOB-worker-i``, with the variables the operator adds to every
container; the job succeeds when the Master succeeds and fails when any replica fails
past ``runPolicy.backoffLimit`` (restartPolicy Never)."""

from __future__ import annotations

import contextlib
from typing import Any

from .kube_apiserver import KUBELET_FINALIZER
from .kube_state import ApiError, ClusterState, now_rfc3339

PODS = ("", "v1", "pods")
SERVICES = ("", "v1", "services")
PYTORCHJOBS = ("kubeflow.org", "v1", "pytorchjobs")
L_JOB, L_TYPE, L_INDEX = (
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index",
)


def operator_env(job: dict[str, Any], rtype: str, index: int) -> list[dict[str, str]]:
    """What the operator appends to each container of replica ``rtype`` ``index``."""
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    nproc = spec.get("nprocPerNode")
    world = total * (int(nproc) if nproc and str(nproc).isdigit() else 1)
    containers = replicas["Master"]["template"]["spec"]["containers"]
    port = next(p["containerPort"] for c in containers if c["name"] == "pytorch"
                for p in c.get("ports", []) if p.get("name") == "pytorchjob-port")  # fmt: skip
    master = f"{job['metadata']['name']}-master-0"
    rank = index + 1 if rtype == "worker" else index
    env = {"PYTHONUNBUFFERED": "1", "MASTER_PORT": str(port), "PET_MASTER_PORT": str(port),
           "MASTER_ADDR": master, "PET_MASTER_ADDR": master, "WORLD_SIZE": str(world),
           "RANK": str(rank), "PET_NODE_RANK": str(rank)}  # fmt: skip
    if nproc is not None:
        env["PET_NPROC_PER_NODE"] = str(nproc)
    env["PET_NNODES"] = str(total)
    return [{"name": k, "value": v} for k, v in env.items()]


def reconcile_pytorchjobs(state: ClusterState) -> None:
    """Create missing replica pods and Services; write each job's status."""
    for job in state.list(PYTORCHJOBS, None)[0]:
        meta = job["metadata"]
        status = job.get("status") or {}
        conditions = status.get("conditions") or []
        if meta.get("deletionTimestamp") or any(
            c["type"] in ("Succeeded", "Failed") and c.get("status") == "True" for c in conditions
        ):
            continue
        ns, name = meta["namespace"], meta["name"]
        pods = {p["metadata"]["name"]: p for p in state.list(PODS, ns, f"{L_JOB}={name}")[0]}
        counts: dict[str, dict[str, int]] = {}
        failed = 0
        master_phase = None
        for rtype_cap, rspec in job["spec"]["pytorchReplicaSpecs"].items():
            rtype = rtype_cap.lower()
            tally = counts.setdefault(rtype_cap, {"active": 0, "succeeded": 0, "failed": 0})
            for i in range(int(rspec.get("replicas", 1))):
                pod_name = f"{name}-{rtype}-{i}"
                pod = pods.get(pod_name)
                if pod is None:
                    _create(state, job, rtype, i, rspec["template"])
                    tally["active"] += 1
                    continue
                phase = (pod.get("status") or {}).get("phase", "Pending")
                key = {"Succeeded": "succeeded", "Failed": "failed"}.get(phase, "active")
                tally[key] += 1
                failed += phase == "Failed"
                if rtype == "master":
                    master_phase = phase
        new = [c for c in conditions]
        types = [c["type"] for c in new]
        if "Created" not in types:
            new.append(_cond("Created", "PyTorchJobCreated", f"PyTorchJob {name} is created."))
        if master_phase == "Running" and "Running" not in types:
            new.append(_cond("Running", "PyTorchJobRunning", f"PyTorchJob {name} is running."))
        if master_phase == "Succeeded":
            new.append(
                _cond(
                    "Succeeded",
                    "PyTorchJobSucceeded",
                    f"PyTorchJob {name} is successfully completed.",
                )
            )
        elif failed > int((job["spec"].get("runPolicy") or {}).get("backoffLimit") or 0):
            new.append(_cond("Failed", "PyTorchJobFailed", f"PyTorchJob {name} has failed."))
            for pod in pods.values():
                if (pod.get("status") or {}).get("phase") in ("Pending", "Running"):
                    state.delete(PODS, ns, pod["metadata"]["name"])
        new_status = {"conditions": new, "replicaStatuses": counts,
                      "startTime": status.get("startTime") or now_rfc3339()}  # fmt: skip
        if {k: status.get(k) for k in new_status} != new_status:
            state.patch(PYTORCHJOBS, ns, name, {"status": new_status}, subresource="status")


def _create(
    state: ClusterState, job: dict[str, Any], rtype: str, index: int, template: dict[str, Any]
) -> None:
    import copy

    meta = job["metadata"]
    name = f"{meta['name']}-{rtype}-{index}"
    labels = {**(template.get("metadata") or {}).get("labels", {}), L_JOB: meta["name"],
              L_TYPE: rtype, L_INDEX: str(index)}  # fmt: skip
    spec = copy.deepcopy(template.get("spec") or {})
    for c in spec.get("containers", []):  # the operator sets env on containers, not init ones
        c["env"] = [*c.get("env", []), *operator_env(job, rtype, index)]
    owner = [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": meta["name"],
              "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
    selector = {L_JOB: meta["name"], L_TYPE: rtype, L_INDEX: str(index)}
    with contextlib.suppress(ApiError):  # kept from an earlier pass
        state.create(SERVICES, meta["namespace"], {
            "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
            "spec": {"clusterIP": "None", "selector": selector},
        })  # fmt: skip
    state.create(PODS, meta["namespace"], {
        "metadata": {"name": name, "labels": labels, "ownerReferences": owner,
                     "finalizers": [KUBELET_FINALIZER]},
        "spec": spec,
    })  # fmt: skip


def _cond(kind: str, reason: str, message: str) -> dict[str, Any]:
    now = now_rfc3339()
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastUpdateTime": now, "lastTransitionTime": now}  # fmt: skip
