"""Nodes: whether a gang can ever fit, and what `top` shows. Pure over API dicts.

GPU shares (sharing.py) count as parts of GPUs: a gpushare node lists its
``aliyun.com/gpu-mem`` GiB over ``aliyun.com/gpu-count`` GPUs, a HAMi node its
``nvidia.com/gpumem`` MiB (and ``nvidia.com/gpucores``) over its GPUs; each pod holding a
share is a holder of ``share`` = its memory over the GPU's, on the GPU the gpushare
extender noted (``ALIYUN_COM_GPU_MEM_IDX``) or, where unknown, the first with room.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from ...errors import SpecError
from ...spec import TrainSpec
from ..base import GpuHolder, GpuInfo, NodeInfo, NodeJob
from .manifests import GPU_RESOURCE, LABEL_JOB
from .sharing import GPUSHARE_COUNT, GPUSHARE_INDEX, GPUSHARE_MEM, HAMI_CORES, HAMI_MEM, share_of
from .status import rank_of

GPU_PRODUCT = "nvidia.com/gpu.product"  # set by NVIDIA's GPU feature discovery
GPU_MEMORY_MIB = "nvidia.com/gpu.memory"
GPU_COUNT = "nvidia.com/gpu.count"  # GPU feature discovery: physical GPUs
COUNTED = (GPU_RESOURCE, GPUSHARE_MEM, HAMI_MEM, HAMI_CORES)  # what a gang's pods ask of a node


def quantity(value: Any) -> float:
    """A Kubernetes quantity ("2", "500m", "16Gi") as a number."""
    return _quantity(str(value))


@functools.lru_cache(maxsize=4096)
def _quantity(text: str) -> float:
    # Memoised: a cluster writes few distinct quantities, and the capacity check of each
    # submit parses every node's allocatable and every pod's requests again (Decimal and
    # a regex, ~5 us each): the check took 0.27 ms a submit, 0.12 with this
    # (bench/kube_submit_phases.py).
    from kubernetes.utils import parse_quantity

    try:
        return float(parse_quantity(text))
    except (ValueError, TypeError):
        return 0.0


def gpus_of(node: dict[str, Any], field: str = "allocatable") -> int:
    """A node's nvidia.com/gpu (allocatable or capacity)."""
    return int(quantity(((node.get("status") or {}).get(field) or {}).get(GPU_RESOURCE, 0)))


NODE_KIND_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type",
                    GPU_PRODUCT)  # fmt: skip
FITTED = ("cpu", "memory", *COUNTED)  # GPUs whole or shared (gpushare, HAMi)
BLOCKING = ("NoSchedule", "NoExecute")
TERMINAL = ("Succeeded", "Failed")


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """What the scheduler reserves for a pod: per resource, the containers' requests
    summed (a limit alone counts as the request, as the API server defaults it), or the
    largest init container's, whichever is more."""

    def of(c: Mapping[str, Any]) -> dict[str, float]:
        res = c.get("resources") or {}
        want = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return {r: quantity(want[r]) for r in FITTED if r in want}

    total: dict[str, float] = {}
    for c in pod_spec.get("containers") or []:
        for r, v in of(c).items():
            total[r] = total.get(r, 0.0) + v
    for c in pod_spec.get("initContainers") or []:
        for r, v in of(c).items():
            total[r] = max(total.get(r, 0.0), v)
    return total


def gang_pods(workload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One pod spec per pod the workload makes: an Indexed Job's ``completions`` copies of
    its template; a Kubeflow job's replicas of each ``*ReplicaSpecs`` entry; a Volcano
    Job's tasks."""
    spec = workload.get("spec") or {}
    if "template" in spec:
        count = int(spec.get("completions") or spec.get("parallelism") or 1)
        return [(spec["template"].get("spec") or {})] * count
    out: list[dict[str, Any]] = []
    groups = [v for k, v in spec.items() if k.endswith("ReplicaSpecs") and isinstance(v, dict)]
    replicas = [r for g in groups for r in g.values()] + list(spec.get("tasks") or [])
    for r in replicas:
        out += [((r.get("template") or {}).get("spec") or {})] * int(r.get("replicas") or 1)
    return out


def tolerated(taint: Mapping[str, Any], tolerations: list[Mapping[str, Any]]) -> bool:
    """Whether one of ``tolerations`` tolerates ``taint`` (Kubernetes' matching rules)."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (
            taint.get("value") or ""
        ):
            return True
    return False


def node_kind(node: Mapping[str, Any]) -> str:
    """What a node is, for grouping reasons: its instance type, GPU product, or name."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    return next((labels[k] for k in NODE_KIND_LABELS if labels.get(k)), meta.get("name", "?"))


def node_free(node: Mapping[str, Any], pods: list[dict[str, Any]]) -> dict[str, float]:
    """Allocatable CPU, memory and GPUs less what the node's pods request. Pods of
    workbench jobs do not count (they end, and the scheduler queues behind them); the
    rest (daemons, system and other tenants' pods) stay while a gang waits."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    free = {r: quantity(alloc.get(r, 0)) for r in FITTED}
    name = (node.get("metadata") or {}).get("name")
    for p in pods:
        labels = (p.get("metadata") or {}).get("labels") or {}
        spec = p.get("spec") or {}
        if spec.get("nodeName") != name or LABEL_JOB in labels:
            continue
        if (p.get("status") or {}).get("phase") in TERMINAL:
            continue
        for r, v in pod_requests(spec).items():
            free[r] -= v
    return free


def _blocker(node: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    """Why ``pod`` may never go to ``node`` whatever runs there (None: it may)."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    selector = pod.get("nodeSelector") or {}
    missing = {k: v for k, v in selector.items() if labels.get(k) != v}
    if missing:
        return f"labels do not match the node selector {missing}"
    tolerations = list(pod.get("tolerations") or [])
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in BLOCKING and not tolerated(taint, tolerations):
            value = f"={taint['value']}" if taint.get("value") else ""
            return f"taint {taint.get('key')}{value}:{taint.get('effect')} is not tolerated"
    return None


def _short(free: Mapping[str, float], need: Mapping[str, float]) -> str | None:
    """Each resource ``need`` exceeds in ``free``, said with both figures (None: it fits)."""
    out = []
    for r in FITTED:
        if need.get(r, 0) > free.get(r, 0) + 1e-9:
            unit = (lambda v: f"{v / 2**30:.3g}Gi") if r == "memory" else (lambda v: f"{v:g}")
            out.append(f"{r}: {unit(need[r])} asked, {unit(max(0.0, free.get(r, 0)))} free")
    return ", ".join(out) or None


def check_gang(nodes: list[dict[str, Any]], spec: TrainSpec, selector: Mapping[str, str],
               warnings: list[str], *, workload: Mapping[str, Any] | None = None,
               pods: list[dict[str, Any]] | None = None) -> None:  # fmt: skip
    """SpecError when the gang can never be placed: each pod (``workload``'s, else
    ``spec.workers`` pods of ``spec.gpus`` GPUs with ``selector``) needs a node whose
    labels match its node selector, whose NoSchedule/NoExecute taints it tolerates, that
    is not cordoned, and whose allocatable CPU, memory and GPUs, less what other pods
    there request (``node_free``), hold its requests. The refusal gives the reason per
    node kind. A warning when the cluster lists no nodes."""
    if not nodes:
        warnings.append("the cluster lists no nodes: capacity was not checked")
        return
    gang = gang_pods(workload) if workload is not None else []
    if not gang:
        gpu = {"limits": {GPU_RESOURCE: str(int(spec.gpus or 0))}} if spec.gpus else {}
        gang = [{"nodeSelector": dict(selector), "containers": [{"resources": gpu}]}]
        gang *= spec.workers
    where = f" matching {dict(gang[0].get('nodeSelector') or {})}" if gang[0].get(
        "nodeSelector") else ""  # fmt: skip
    shapes = [pod_requests(p) for p in gang]
    for key in sorted({r for shape in shapes for r in shape if r in COUNTED[1:]}):
        if not any(quantity(((n.get("status") or {}).get("allocatable") or {}).get(key, 0))
                   for n in nodes):  # fmt: skip
            raise SpecError("gpus", f"no node advertises {key}, which a GPU share asks for",
                            "install that sharing scheme's device plugin, or set "
                            "kubernetes.gpu_sharing to the scheme your nodes run")  # fmt: skip
    # The largest pod first (first-fit decreasing): a gang that this packing cannot place
    # is refused only when even one pod fits nowhere or the pods outnumber the slots.
    order = sorted(range(len(gang)), key=lambda i: [-shapes[i].get(r, 0) for r in reversed(FITTED)])
    free = {n["metadata"]["name"]: node_free(n, pods or []) for n in nodes}
    reasons: dict[str, dict[str, list[str]]] = {}  # kind -> reason -> node names
    first = gang[order[0]]
    for n in nodes:
        why = _blocker(n, first) or _short(free[n["metadata"]["name"]], shapes[order[0]])
        if why is not None:
            reasons.setdefault(node_kind(n), {}).setdefault(why, []).append(n["metadata"]["name"])
    if len(reasons) and sum(len(v) for r in reasons.values() for v in r.values()) == len(nodes):
        _refuse_one(nodes, spec, shapes[order[0]], reasons, where, first)
    placed = 0
    for i in order:
        for n in nodes:
            name = n["metadata"]["name"]
            if _blocker(n, gang[i]) is None and _short(free[name], shapes[i]) is None:
                for r, v in shapes[i].items():
                    free[name][r] -= v
                placed += 1
                break
    if placed < len(gang):
        need = int(spec.gpus or 0)
        what = f"x {need} {GPU_RESOURCE} " if need else ""
        eligible = [n for n in nodes if _blocker(n, first) is None]
        raise SpecError("workers", f"{len(gang)} workers {what}can never fit: the "
                        f"{len(eligible)} node(s){where} hold at most {placed} such workers",
                        f"use at most {placed} workers")  # fmt: skip


def _refuse_one(nodes: list[dict[str, Any]], spec: TrainSpec, shape: Mapping[str, float],
                reasons: dict[str, dict[str, list[str]]], where: str,
                pod: Mapping[str, Any]) -> None:  # fmt: skip
    """No node can take even one pod: SpecError naming the field and each kind's reason."""
    per_kind = "; ".join(
        f"{kind} ({len(names)} node{'s' if len(names) > 1 else ''}): {why}"
        for kind, by in sorted(reasons.items()) for why, names in sorted(by.items())
    )  # fmt: skip
    eligible = [n for n in nodes if _blocker(n, pod) is None]
    if not eligible:
        raise SpecError("instance_spec", f"no schedulable node{where}: {per_kind}",
                        "pick another instance spec (its node selector and tolerations) or "
                        "ask your cluster admin")  # fmt: skip
    short = [_short(node_free(n, []), shape) or "" for n in eligible]
    need = int(spec.gpus or 0)
    if need and all(GPU_RESOURCE in s for s in short):
        best = max(eligible, key=gpus_of)
        raise SpecError("gpus", f"no node{where} has {need} {GPU_RESOURCE} (the most any has is "
                        f"{gpus_of(best)}, on {best['metadata']['name']}): {per_kind}",
                        "ask for fewer GPUs per worker and more workers")  # fmt: skip
    if any(f"{key}:" in s for s in short for key in COUNTED[1:]):
        field = "gpus"
    else:
        field = "memory" if any("memory:" in s for s in short) else "cpu"
    raise SpecError(field, f"no node{where} can take a worker ({_shape(shape)}): {per_kind}",
                    f"ask for less {field} per worker, or pick an instance spec that fits")  # fmt: skip


def _shape(shape: Mapping[str, float]) -> str:
    parts = []
    for r in FITTED:
        if shape.get(r):
            parts.append(
                f"{shape[r] / 2**30:.3g}Gi memory" if r == "memory" else f"{shape[r]:g} {r}"
            )
    return ", ".join(parts) or "no requests"


def node_infos(nodes: list[dict[str, Any]], pods: list[dict[str, Any]],
               jobs_known: Mapping[str, tuple[str, float]]) -> list[NodeInfo]:  # fmt: skip
    """NodeInfo per node: allocatable GPUs, each held by a job's rank where a pod has it;
    ``jobs_known`` gives each stored job's (status, GPUs in the whole job)."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for p in pods:
        by_node.setdefault(p["spec"]["nodeName"], []).append(p)
    out = []
    for n in nodes:
        meta, status = n.get("metadata") or {}, n.get("status") or {}
        labels = meta.get("labels") or {}
        alloc, cap = gpus_of(n), gpus_of(n, "capacity")
        holders: list[tuple[str, int]] = []
        jobs: dict[str, float] = {}
        for p in by_node.get(meta.get("name", ""), []):
            job = ((p.get("metadata") or {}).get("labels") or {}).get(LABEL_JOB)
            want = sum(int(quantity(((c.get("resources") or {}).get("limits") or {})
                                    .get(GPU_RESOURCE, 0))) for c in p["spec"].get("containers") or [])  # fmt: skip
            if job is None:
                holders += [("(other)", -1)] * want
                continue
            jobs[job] = jobs.get(job, 0.0) + want
            holders += [(job, rank_of(p) or 0)] * want
        memory = int(quantity(labels.get(GPU_MEMORY_MIB, 0)) * 1024 * 1024)
        gpus = tuple(
            GpuInfo(index=i, name=labels.get(GPU_PRODUCT, GPU_RESOURCE), memory_total=memory,
                    allocated=1.0 if i < len(holders) else 0.0,
                    holders=(GpuHolder(holders[i][0], holders[i][1], 1.0),) if i < len(holders) else ())
            for i in range(alloc)
        )  # fmt: skip
        shared = _shared_gpus(n, by_node.get(meta.get("name", ""), []))
        if shared is not None:  # a gpushare or HAMi node: GPUs held in parts
            gpus, jobs = shared
            cap = alloc = len(gpus)
        reason = None
        if cap == 0:
            reason = f"no {GPU_RESOURCE} on this node"
        elif alloc < cap:
            reason = f"{alloc} of {cap} GPUs allocatable"
        alloc_cpu = status.get("allocatable") or {}
        out.append(NodeInfo(
            name=meta.get("name", ""), backend="kubernetes",
            cpu_count=int(quantity(alloc_cpu.get("cpu", 0))) or None,
            memory_total=int(quantity(alloc_cpu.get("memory", 0))) or None,
            gpus=gpus, gpu_reason=reason,
            active_jobs=tuple(NodeJob(j, *jobs_known.get(j, ("Running", g))) for j, g in sorted(jobs.items())),
            labels=dict(labels),
        ))  # fmt: skip
    return out


def _shared_gpus(node: dict[str, Any], pods: list[dict[str, Any]]
                 ) -> tuple[tuple[GpuInfo, ...], dict[str, float]] | None:  # fmt: skip
    """The GPUs of a node that advertises GPU shares, each with the parts jobs hold, and
    each job's GPUs' worth on the node; None for a node without shares."""
    alloc = (node.get("status") or {}).get("allocatable") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if quantity(alloc.get(GPUSHARE_MEM, 0)) > 0:
        count = int(quantity(alloc.get(GPUSHARE_COUNT, 0)) or quantity(labels.get(GPU_COUNT, 1)))
        total = quantity(alloc[GPUSHARE_MEM]) * 2**30
    elif quantity(alloc.get(HAMI_MEM, 0)) > 0:
        cores = quantity(alloc.get(HAMI_CORES, 0)) // 100
        count = int(quantity(labels.get(GPU_COUNT, 0)) or cores or 1)
        total = quantity(alloc[HAMI_MEM]) * 2**20
    else:
        return None
    count = max(1, count)
    per = int(total // count)
    held: list[list[GpuHolder]] = [[] for _ in range(count)]
    used = [0.0] * count
    jobs: dict[str, float] = {}
    for p in pods:
        meta = p.get("metadata") or {}
        limits: dict[str, float] = {}
        for c in (p.get("spec") or {}).get("containers") or []:
            for k, v in ((c.get("resources") or {}).get("limits") or {}).items():
                limits[k] = limits.get(k, 0.0) + quantity(v)
        share = share_of(limits, per, float)
        parts = [share] if share is not None else [1.0] * int(limits.get(GPU_RESOURCE, 0))
        job = (meta.get("labels") or {}).get(LABEL_JOB)
        holder, rank = (job or "(other)"), (rank_of(p) or 0) if job else -1
        noted = str((meta.get("annotations") or {}).get(GPUSHARE_INDEX, ""))
        for part in parts:
            if noted.isdigit() and int(noted) < count:
                i = int(noted)  # the gpushare extender's pick
            else:  # the first GPU with room, else the least used
                i = next((g for g in range(count) if used[g] + part <= 1 + 1e-9),
                         min(range(count), key=used.__getitem__))  # fmt: skip
            used[i] += part
            held[i].append(GpuHolder(holder, rank, round(part, 4)))
            if job:
                jobs[job] = jobs.get(job, 0.0) + part
    name = labels.get(GPU_PRODUCT, GPU_RESOURCE)
    gpus = tuple(GpuInfo(index=i, name=name, memory_total=per, allocated=round(used[i], 4),
                         holders=tuple(held[i])) for i in range(count))  # fmt: skip
    return gpus, jobs
