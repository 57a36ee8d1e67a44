"""Nodes: whether a gang can ever fit, and what `top` shows. Pure over API dicts.

GPU shares (sharing.py) count as parts of GPUs: a gpushare node lists its
``aliyun.com/gpu-mem`` GiB over ``aliyun.com/gpu-count`` GPUs, a HAMi node its
``nvidia.com/gpumem`` MiB (and ``nvidia.com/gpucores``) over its GPUs; each pod holding a
share is a holder of ``share`` = its memory over the GPU's, on the GPU the gpushare
extender noted (``ALIYUN_COM_GPU_MEM_IDX``) or, where unknown, the first with room.
"""

from __future__ import annotations

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
    from kubernetes.utils import parse_quantity

    try:
        return float(parse_quantity(str(value)))
    except (ValueError, TypeError):
        return 0.0


def gpus_of(node: dict[str, Any], field: str = "allocatable") -> int:
    """A node's nvidia.com/gpu (allocatable or capacity)."""
    return int(quantity(((node.get("status") or {}).get(field) or {}).get(GPU_RESOURCE, 0)))


def check_gang(nodes: list[dict[str, Any]], spec: TrainSpec, selector: Mapping[str, str],
               warnings: list[str], limits: Mapping[str, Any] | None = None) -> None:  # fmt: skip
    """SpecError when ``spec.workers`` pods of ``spec.gpus`` GPUs each (or of the GPU
    share in ``limits``) can never be placed on the nodes (allocatable GPUs, node
    selector, cordoned nodes left out), whatever else runs; a warning when the cluster
    lists no nodes."""
    if not nodes:
        warnings.append("the cluster lists no nodes: capacity was not checked")
        return
    eligible = [n for n in nodes if not (n.get("spec") or {}).get("unschedulable")
                and all(((n.get("metadata") or {}).get("labels") or {}).get(k) == v
                        for k, v in selector.items())]  # fmt: skip
    where = f" matching {dict(selector)}" if selector else ""
    if not eligible:
        raise SpecError("spec", f"no schedulable node{where}",
                        "pick another instance spec or ask your cluster admin")  # fmt: skip
    shares = {k: quantity(v) for k, v in (limits or {}).items() if k in COUNTED[1:]}
    if shares:
        _check_shares(eligible, spec.workers, shares, where)
        return
    need = int(spec.gpus or 0)
    if need <= 0:
        return
    slots = {n["metadata"]["name"]: gpus_of(n) // need for n in eligible}
    if max(slots.values()) == 0:
        best = max(eligible, key=gpus_of)
        raise SpecError("gpus", f"no node{where} has {need} {GPU_RESOURCE} (the most any has is "
                        f"{gpus_of(best)}, on {best['metadata']['name']})",
                        "ask for fewer GPUs per worker and more workers")  # fmt: skip
    total = sum(slots.values())
    if total < spec.workers:
        raise SpecError("workers", f"{spec.workers} workers x {need} {GPU_RESOURCE} can never fit: "
                        f"the {len(eligible)} node(s){where} hold at most {total} such workers",
                        f"use at most {total} workers")  # fmt: skip


def _check_shares(eligible: list[dict[str, Any]], workers: int, shares: Mapping[str, float],
                  where: str) -> None:  # fmt: skip
    """The share version of the check: every worker's share resources on some node."""

    def alloc(n: dict[str, Any], key: str) -> float:
        return quantity(((n.get("status") or {}).get("allocatable") or {}).get(key, 0))

    key = next(iter(shares))
    if not any(alloc(n, key) for n in eligible):
        raise SpecError("gpus", f"no node{where} advertises {key}, which a GPU share asks for",
                        "install that sharing scheme's device plugin, or set "
                        "kubernetes.gpu_sharing to the scheme your nodes run")  # fmt: skip
    total = sum(int(min(alloc(n, k) // v for k, v in shares.items() if v)) for n in eligible)
    if total < workers:
        raise SpecError("workers", f"{workers} workers x {shares[key]:g} {key} can never fit: the "
                        f"nodes{where} hold at most {total} such workers", f"use at most {total} workers")  # fmt: skip


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
