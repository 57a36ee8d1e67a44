"""An in-process TFJob controller for the fake cluster, after Kubeflow's training-operator
v1.9 (pkg/controller.v1/tensorflow: tensorflow.go, tfjob_controller.go; learned from the
source, not copied): one pod and one headless Service per replica, named
``JOB-TYPE-i``; TF_CONFIG on the ``tensorflow`` container of a distributed job (more than
one replica in all), its cluster listing every replica as ``JOB-TYPE-i.NS.svc:PORT``
(PORT: the container's ``tfjob-port``, else 2222). With a Chief the job succeeds when the
Chief succeeds; it fails when any replica fails past ``runPolicy.backoffLimit``
(restartPolicy Never), and the rest of its pods are deleted."""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

from workbench.backends._processes import free_ports

from .kube_apiserver import KUBELET_FINALIZER
from .kube_state import ApiError, ClusterState, now_rfc3339

PODS = ("", "v1", "pods")
SERVICES = ("", "v1", "services")
TFJOBS = ("kubeflow.org", "v1", "tfjobs")
L_JOB, L_TYPE, L_INDEX, L_OPERATOR = (
    "training.kubeflow.org/job-name",
    "training.kubeflow.org/replica-type",
    "training.kubeflow.org/replica-index",
    "training.kubeflow.org/operator-name",
)
DEFAULT_PORT = 2222


def _port(template: dict[str, Any]) -> int:
    for c in (template.get("spec") or {}).get("containers", []):
        if c.get("name") == "tensorflow":
            for p in c.get("ports", []):
                if p.get("name") == "tfjob-port":
                    return int(p["containerPort"])
    return DEFAULT_PORT


def tf_config(job: dict[str, Any], rtype: str, index: int) -> str | None:
    """The TF_CONFIG the operator gives replica ``rtype`` (lower case) ``index``; None
    for a job of one replica (the operator leaves a local job alone)."""
    replicas = job["spec"]["tfReplicaSpecs"]
    if sum(int(r.get("replicas", 1)) for r in replicas.values()) <= 1:
        return None
    meta = job["metadata"]
    cluster = {
        t.lower(): [f"{meta['name']}-{t.lower()}-{i}.{meta['namespace']}.svc:{_port(r['template'])}"
                    for i in range(int(r.get("replicas", 1)))]
        for t, r in replicas.items()
    }  # fmt: skip
    # Go's encoding/json: struct fields in order, map keys sorted, no spaces.
    config = {"cluster": dict(sorted(cluster.items())),
              "task": {"type": rtype, "index": index}, "environment": "cloud"}  # fmt: skip
    return json.dumps(config, separators=(",", ":"))


def reconcile_tfjobs(state: ClusterState) -> None:
    """Create missing replica pods and Services; write each job's status."""
    for job in state.list(TFJOBS, None)[0]:
        meta = job["metadata"]
        status = job.get("status") or {}
        conditions = status.get("conditions") or []
        if meta.get("deletionTimestamp") or any(
            c["type"] in ("Succeeded", "Failed") and c.get("status") == "True" for c in conditions
        ):
            continue
        ns, name = meta["namespace"], meta["name"]
        pods = {p["metadata"]["name"]: p for p in state.list(PODS, ns, f"{L_JOB}={name}")[0]}
        replicas = job["spec"]["tfReplicaSpecs"]
        master = "Chief" if "Chief" in replicas else ("Master" if "Master" in replicas else None)
        counts: dict[str, dict[str, int]] = {}
        failed = 0
        master_phase = None
        for rtype_cap, rspec in replicas.items():
            rtype = rtype_cap.lower()
            tally = counts.setdefault(rtype_cap, {"active": 0, "succeeded": 0, "failed": 0})
            for i in range(int(rspec.get("replicas", 1))):
                pod = pods.get(f"{name}-{rtype}-{i}")
                if pod is None:
                    _create(state, job, rtype, i, rspec["template"])
                    tally["active"] += 1
                    continue
                phase = (pod.get("status") or {}).get("phase", "Pending")
                tally[{"Succeeded": "succeeded", "Failed": "failed"}.get(phase, "active")] += 1
                failed += phase == "Failed"
                if rtype_cap == master or (master is None and rtype == "worker" and i == 0):
                    master_phase = phase
        new = list(conditions)
        types = [c["type"] for c in new]
        if "Created" not in types:
            new.append(_cond("Created", "TFJobCreated", f"TFJob {name} is created."))
        if master_phase == "Running" and "Running" not in types:
            new.append(_cond("Running", "TFJobRunning", f"TFJob {name} is running."))
        if master_phase == "Succeeded":
            new.append(_cond("Succeeded", "TFJobSucceeded",
                             f"TFJob {name} successfully completed."))  # fmt: skip
        elif failed > int((job["spec"].get("runPolicy") or {}).get("backoffLimit") or 0):
            new.append(_cond("Failed", "TFJobFailed", f"TFJob {name} has failed."))
            for pod in pods.values():
                if (pod.get("status") or {}).get("phase") in ("Pending", "Running"):
                    state.delete(PODS, ns, pod["metadata"]["name"])
        new_status = {"conditions": new, "replicaStatuses": counts,
                      "startTime": status.get("startTime") or now_rfc3339()}  # fmt: skip
        if {k: status.get(k) for k in new_status} != new_status:
            state.patch(TFJOBS, ns, name, {"status": new_status}, subresource="status")


def _create(state: ClusterState, job: dict[str, Any], rtype: str, index: int,
            template: dict[str, Any]) -> None:  # fmt: skip
    meta = job["metadata"]
    name = f"{meta['name']}-{rtype}-{index}"
    labels = {**(template.get("metadata") or {}).get("labels", {}), L_JOB: meta["name"],
              L_TYPE: rtype, L_INDEX: str(index), L_OPERATOR: "tfjob-controller"}  # fmt: skip
    spec = copy.deepcopy(template.get("spec") or {})
    config = tf_config(job, rtype, index)
    for c in spec.get("containers", []):
        if c.get("name") == "tensorflow" and config is not None:
            c["env"] = [*c.get("env", []), {"name": "TF_CONFIG", "value": config}]
    owner = [{"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": meta["name"],
              "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
    selector = {L_JOB: meta["name"], L_TYPE: rtype, L_INDEX: str(index)}
    port = _port(template)
    with contextlib.suppress(ApiError):  # kept from an earlier pass
        state.create(SERVICES, meta["namespace"], {
            "metadata": {"name": name, "labels": labels, "ownerReferences": owner},
            "spec": {"clusterIP": "None", "selector": selector,
                     "ports": [{"name": "tfjob-port", "port": port, "targetPort": port}]},
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


def loopback_tf_config(value: str, dns_names: set[str], ports: dict[str, int]) -> str:
    """TF_CONFIG with each ``HOST:PORT`` whose HOST the cluster publishes turned into
    ``127.0.0.1:P`` (P: one free loopback port per host, the same in every pod): the fake
    node's pods share one network, where each real pod has its own address."""
    try:
        config = json.loads(value)
    except ValueError:
        return value

    def local(endpoint: str) -> str:
        host, _, _ = endpoint.rpartition(":")
        if host not in dns_names:
            return endpoint
        if host not in ports:
            # setdefault: pods start in threads of their own, and the first port given
            # for a host is the one every pod's TF_CONFIG names (two differed: a flake)
            ports.setdefault(host, free_ports(1)[0])
        return f"127.0.0.1:{ports[host]}"

    cluster = config.get("cluster") or {}
    for rtype, tasks in cluster.items():
        if isinstance(tasks, list):
            cluster[rtype] = [local(t) for t in tasks]
        elif isinstance(tasks, dict):  # the sparse form (enableDynamicWorker)
            cluster[rtype] = {k: local(t) for k, t in tasks.items()}
    return json.dumps(config, separators=(",", ":"))
