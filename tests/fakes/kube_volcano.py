"""An in-process Volcano for the fake cluster: the job controller (batch.volcano.sh/v1alpha1
Job -> PodGroup, pods, the svc and env plugins) and the scheduler's gang admission, after
volcano-sh/volcano ed72c7c8 (pkg/controllers/job, job/plugins/{svc,env}, scheduler/plugins/
{gang,overcommit}; learned from the source, not copied).

* PodGroup ``JOB-UID`` (the Job's labels and annotations, minMember = minAvailable, the
  queue and priority class), created Pending.
* Gang admission (enqueue + allocate in one step): when every one of minAvailable pods
  fits the nodes' free extended resources (nvidia.com/gpu, aliyun.com/gpu-mem,
  nvidia.com/gpumem, nvidia.com/gpucores), the PodGroup goes Inqueue and the controller
  creates all the pods, bound to the nodes picked. When they do not, NO pod is created:
  the PodGroup stays Pending with an ``Unschedulable`` condition (reason
  NotEnoughResources) carrying the overcommit plugin's text ("resource in cluster is
  overused: overused nvidia.com/gpu"), the scheduler's event on the PodGroup, and the job
  controller's ``PodGroupPending`` Warning event on the Job. (Real Volcano writes the
  enqueue refusal as an event and the condition from the gang plugin's FitError; the fake
  puts the refusal's text in the condition, where a client reads it.) Admission is tried
  again on every pass, so a gang starts once resources free up.
* svc plugin: headless Service ``JOB`` (selector volcano.sh/job-name + job-namespace),
  ConfigMap ``JOB-svc`` with ``worker.host`` / ``VC_WORKER_HOSTS`` / ``VC_WORKER_NUM``,
  each pod's hostname ``JOB-TASK-I`` and subdomain ``JOB``, the VC_* variables as
  configMapKeyRefs, the ConfigMap mounted at /etc/volcano. env plugin: VK_TASK_INDEX and
  VC_TASK_INDEX in every container and init container. No NetworkPolicy is made.
* Status: state.phase Pending -> Running (minAvailable pods running) -> Completed (all
  succeeded) or, by the ``PodFailed: TerminateJob`` policy, Terminating (active pods
  deleted) -> Terminated; a condition per phase, as the controller appends them.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from .kube_apiserver import KUBELET_FINALIZER, FakeKubeAPIServer
from .kube_state import ApiError, ClusterState, now_rfc3339

VCJOBS = ("batch.volcano.sh", "v1alpha1", "jobs")
PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")
PODS = ("", "v1", "pods")
SERVICES = ("", "v1", "services")
CONFIGMAPS = ("", "v1", "configmaps")
NODES = ("", "v1", "nodes")
JOB_NAME, JOB_NS, TASK_SPEC, TASK_INDEX, QUEUE = (
    "volcano.sh/job-name", "volcano.sh/job-namespace", "volcano.sh/task-spec",
    "volcano.sh/task-index", "volcano.sh/queue-name")  # fmt: skip
GROUP_NAME = "scheduling.k8s.io/group-name"
# Extended resources the gang admission counts (cpu and memory are left out, as the
# fake kubelet's scheduler leaves them out).
COUNTED = ("nvidia.com/gpu", "aliyun.com/gpu-mem", "nvidia.com/gpumem", "nvidia.com/gpucores")
API_GROUPS = {"batch.volcano.sh": ["v1alpha1"], "scheduling.volcano.sh": ["v1beta1"]}
ACTIVE = ("Pending", "Running")
FINAL = ("Completed", "Terminated", "Failed", "Aborted")


def serve_volcano(state: ClusterState) -> None:
    """Make the fake API server list Volcano's groups in discovery."""
    with state.lock:
        state.api_groups.update(API_GROUPS)


def hosts_data(job: dict[str, Any]) -> dict[str, str]:
    """The svc plugin's ConfigMap data (GenerateHosts)."""
    name, out = job["metadata"]["name"], {}
    for task in job["spec"]["tasks"]:
        hosts = [f"{name}-{task['name']}-{i}.{name}" for i in range(int(task.get("replicas", 1)))]
        key = task["name"].replace("-", "_")
        out[f"{key}.host"] = "\n".join(hosts)
        out[f"VC_{key.upper()}_HOSTS"] = ",".join(hosts)
        out[f"VC_{key.upper()}_NUM"] = str(len(hosts))
    return out


def reconcile_volcano(fake: FakeKubeAPIServer) -> None:
    """One pass of the Volcano controller and scheduler over every Volcano Job."""
    state = fake.state
    for job in state.list(VCJOBS, None)[0]:
        meta = job["metadata"]
        status = job.get("status") or {}
        phase = (status.get("state") or {}).get("phase")
        if meta.get("deletionTimestamp") or phase in FINAL:
            continue
        ns, name = meta["namespace"], meta["name"]
        pg = _podgroup(state, job)
        if phase is None:
            _plugins_on_job_add(state, job)
            status = _set_phase(state, job, "Pending", {"controlledResources": {
                "plugin-svc": "svc", "plugin-env": "env"}, "minAvailable": job["spec"]["minAvailable"]})  # fmt: skip
        pods = [p for p in state.list(PODS, ns, f"{JOB_NAME}={name}")[0]
                if _owned(p, meta["uid"])]  # fmt: skip
        if not pods and (pg.get("status") or {}).get("phase") == "Pending":
            _admit(fake, job, pg)
            continue
        _sync_status(state, job, pg, pods)


def _podgroup(state: ClusterState, job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    name = f"{meta['name']}-{meta['uid']}"
    with contextlib.suppress(ApiError):
        return state.get(PODGROUPS, meta["namespace"], name)
    spec = job["spec"]
    pg_spec: dict[str, Any] = {
        "minMember": spec.get("minAvailable", 0),
        "minTaskMember": {
            t["name"]: t.get("minAvailable", t.get("replicas", 1)) for t in spec["tasks"]
        },
        "queue": spec.get("queue", "default"),
        "minResources": _min_resources(job),
    }
    if spec.get("priorityClassName"):
        pg_spec["priorityClassName"] = spec["priorityClassName"]
    body = {
        "metadata": {"name": name, "labels": dict(meta.get("labels") or {}),
                     "annotations": dict(meta.get("annotations") or {}),
                     "ownerReferences": [_owner(job)]},
        "spec": pg_spec,
        "status": {"phase": "Pending"},
    }  # fmt: skip
    return state.create(PODGROUPS, meta["namespace"], body)


def _min_resources(job: dict[str, Any]) -> dict[str, str]:
    total: dict[str, float] = {}
    for task in job["spec"]["tasks"]:
        for key, value in _limits(task["template"]).items():
            total[key] = total.get(key, 0) + value * int(task.get("replicas", 1))
    return {k: f"{v:g}" for k, v in total.items()}


def _limits(template: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in (template.get("spec") or {}).get("containers") or []:
        for key, value in ((c.get("resources") or {}).get("limits") or {}).items():
            if key in COUNTED:
                out[key] = out.get(key, 0) + float(value)
    return out


def _plugins_on_job_add(state: ClusterState, job: dict[str, Any]) -> None:
    meta = job["metadata"]
    ns, name = meta["namespace"], meta["name"]
    plugins = job["spec"].get("plugins") or {}
    if "svc" in plugins:
        with contextlib.suppress(ApiError):
            state.create(CONFIGMAPS, ns, {"metadata": {"name": f"{name}-svc",
                         "ownerReferences": [_owner(job)]}, "data": hosts_data(job)})  # fmt: skip
        with contextlib.suppress(ApiError):
            state.create(SERVICES, ns, {
                "metadata": {"name": name, "ownerReferences": [_owner(job)]},
                "spec": {"clusterIP": "None", "selector": {JOB_NAME: name, JOB_NS: ns},
                         "publishNotReadyAddresses": "--publish-not-ready-addresses" in plugins["svc"]},
            })  # fmt: skip


def _admit(fake: FakeKubeAPIServer, job: dict[str, Any], pg: dict[str, Any]) -> None:
    """Bind every pod of the gang or none; Unschedulable when it does not fit."""
    state, meta = fake.state, job["metadata"]
    ns, name = meta["namespace"], meta["name"]
    wanted = [(t, i) for t in job["spec"]["tasks"] for i in range(int(t.get("replicas", 1)))]
    placement, short = _place(state, [_limits(t["template"]) for t, _ in wanted])
    if placement is None:
        message = "resource in cluster is overused: " + ", ".join(f"overused {r}" for r in short)
        conds = (pg.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Unschedulable" and c.get("message") == message for c in conds):
            return  # said already
        now = now_rfc3339()
        cond = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources",
                "message": message, "lastTransitionTime": now, "transitionID": "fake"}  # fmt: skip
        state.patch(PODGROUPS, ns, pg["metadata"]["name"],
                    {"status": {"phase": "Pending", "conditions": [cond]}}, subresource="status")  # fmt: skip
        fake.record_event(ns, {"kind": "PodGroup", "apiVersion": "scheduling.volcano.sh/v1beta1",
                               **pg}, "Unschedulable", message, type_="Normal")  # fmt: skip
        fake.record_event(ns, {"kind": "Job", "apiVersion": "batch.volcano.sh/v1alpha1", **job},
                          "PodGroupPending",
                          f"PodGroup {ns}:{name} unschedulable, reason: {message}")  # fmt: skip
        return
    cond = {"type": "Scheduled", "status": "True", "reason": "tasks in gang are ready to be scheduled",
            "message": "", "lastTransitionTime": now_rfc3339(), "transitionID": "fake"}  # fmt: skip
    state.patch(PODGROUPS, ns, pg["metadata"]["name"],
                {"status": {"phase": "Inqueue", "conditions": [cond]}}, subresource="status")  # fmt: skip
    for (task, index), node in zip(wanted, placement, strict=True):
        _create_pod(state, job, pg, task, index, node)


def _place(state: ClusterState,
           wants: list[dict[str, float]]) -> tuple[list[str] | None, list[str]]:  # fmt: skip
    """First fit of each pod's extended resources on the nodes' free ones: the node of
    each pod, or None and the resources that ran short."""
    nodes = state.list(NODES, None)[0]
    if not nodes:
        return ["fake-node-0"] * len(wants), []
    free: dict[str, dict[str, float]] = {}
    for n in nodes:
        if (n.get("spec") or {}).get("unschedulable"):
            continue
        alloc = (n.get("status") or {}).get("allocatable") or {}
        free[n["metadata"]["name"]] = {k: float(alloc.get(k, 0)) for k in COUNTED}
    for p in state.list(PODS, None)[0]:
        node = (p.get("spec") or {}).get("nodeName")
        if node in free and (p.get("status") or {}).get("phase", "Pending") in ACTIVE:
            for key, value in _limits(p).items():
                free[node][key] -= value
    out, short = [], set()
    for want in wants:
        fit = next((n for n, f in free.items() if all(f[k] >= v for k, v in want.items())), None)
        if fit is None:
            short |= {k for k, v in want.items() if all(f[k] < v for f in free.values())} or set(
                want
            )
            return None, sorted(short)
        for key, value in want.items():
            free[fit][key] -= value
        out.append(fit)
    return out, []


def _create_pod(state: ClusterState, job: dict[str, Any], pg: dict[str, Any],
                task: dict[str, Any], index: int, node: str) -> None:  # fmt: skip
    meta, tmpl = job["metadata"], task["template"]
    ns, name, tname = meta["namespace"], meta["name"], task["name"]
    spec = copy.deepcopy(tmpl.get("spec") or {})
    pod_name = f"{name}-{tname}-{index}"
    spec.setdefault("schedulerName", job["spec"].get("schedulerName"))
    if job["spec"].get("priorityClassName"):
        spec.setdefault("priorityClassName", job["spec"]["priorityClassName"])
    spec["nodeName"] = node  # bound by the scheduler
    plugins = job["spec"].get("plugins") or {}
    env: list[dict[str, Any]] = []
    if "env" in plugins:
        env += [{"name": "VK_TASK_INDEX", "value": str(index)},
                {"name": "VC_TASK_INDEX", "value": str(index)}]  # fmt: skip
    if "svc" in plugins:
        spec.setdefault("hostname", pod_name)
        spec.setdefault("subdomain", name)
        for t in job["spec"]["tasks"]:
            key = t["name"].replace("-", "_").upper()
            env += [{"name": v, "valueFrom": {"configMapKeyRef": {"name": f"{name}-svc", "key": v}}}
                    for v in (f"VC_{key}_HOSTS", f"VC_{key}_NUM")]  # fmt: skip
        spec.setdefault("volumes", []).append(
            {"name": f"{name}-svc", "configMap": {"name": f"{name}-svc"}}
        )
    for c in [*spec.get("containers", []), *spec.get("initContainers", [])]:
        c["env"] = [*c.get("env", []), *env]
        if "svc" in plugins:
            c["volumeMounts"] = [*c.get("volumeMounts", []),
                                 {"name": f"{name}-svc", "mountPath": "/etc/volcano"}]  # fmt: skip
    queue = job["spec"].get("queue", "default")
    labels = {**(tmpl.get("metadata") or {}).get("labels", {}), TASK_INDEX: str(index),
              JOB_NAME: name, TASK_SPEC: tname, JOB_NS: ns, QUEUE: queue}  # fmt: skip
    annotations = {**(tmpl.get("metadata") or {}).get("annotations", {}), TASK_INDEX: str(index),
                   TASK_SPEC: tname, GROUP_NAME: pg["metadata"]["name"], JOB_NAME: name,
                   QUEUE: queue}  # fmt: skip
    with contextlib.suppress(ApiError):  # made by an earlier pass
        state.create(PODS, ns, {
            "metadata": {"name": pod_name, "labels": labels, "annotations": annotations,
                         "ownerReferences": [_owner(job)], "finalizers": [KUBELET_FINALIZER]},
            "spec": spec,
        })  # fmt: skip


def _sync_status(state: ClusterState, job: dict[str, Any], pg: dict[str, Any],
                 pods: list[dict[str, Any]]) -> None:  # fmt: skip
    meta, spec = job["metadata"], job["spec"]
    ns = meta["namespace"]
    counts = {k: 0 for k in ("pending", "running", "succeeded", "failed")}
    for p in pods:
        counts[(p.get("status") or {}).get("phase", "Pending").lower()] += 1
    total = sum(int(t.get("replicas", 1)) for t in spec["tasks"])
    phase = ((job.get("status") or {}).get("state") or {}).get("phase")
    terminate = any(
        pol.get("event") in ("PodFailed", "*") and pol.get("action") == "TerminateJob"
        for pol in spec.get("policies") or []
    )
    if phase == "Terminating" or (counts["failed"] and terminate):
        live = [p for p in pods if (p.get("status") or {}).get("phase", "Pending") in ACTIVE]
        for p in live:
            with contextlib.suppress(ApiError):
                state.delete(PODS, ns, p["metadata"]["name"])
        new = "Terminating" if live else "Terminated"
    elif counts["succeeded"] == total:
        new = "Completed"
    elif counts["succeeded"] + counts["failed"] == total:
        new = "Completed" if counts["succeeded"] >= spec.get("minAvailable", 0) else "Failed"
    elif counts["running"] + counts["succeeded"] >= spec.get("minAvailable", 0):
        new = "Running"
    else:
        new = "Pending"
    _set_phase(state, job, new, counts)
    pg_phase = {"Running": "Running", "Completed": "Completed", "Terminated": "Completed"}.get(new)
    if pg_phase and (pg.get("status") or {}).get("phase") != pg_phase:
        state.patch(PODGROUPS, ns, pg["metadata"]["name"], {"status": {
            "phase": pg_phase, "running": counts["running"], "succeeded": counts["succeeded"],
            "failed": counts["failed"]}}, subresource="status")  # fmt: skip


def _set_phase(state: ClusterState, job: dict[str, Any], phase: str,
               extra: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    status = copy.deepcopy(job.get("status") or {})
    old = (status.get("state") or {}).get("phase")
    changed = old != phase or any(status.get(k) != v for k, v in extra.items())
    if not changed:
        return status
    status.update(extra)
    if old != phase:
        now = now_rfc3339()
        status["state"] = {"phase": phase, "lastTransitionTime": now}
        status["conditions"] = [*status.get("conditions", []),
                                {"status": phase, "lastTransitionTime": now}]  # fmt: skip
    meta = job["metadata"]
    job["status"] = status
    state.patch(VCJOBS, meta["namespace"], meta["name"], {"status": status}, subresource="status")
    return status


def _owner(job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": meta["name"],
            "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _owned(obj: dict[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])
