"""Nodes: whether a gang can ever fit, and what `top` shows. Pure over API dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...errors import SpecError
from ...spec import TrainSpec
from ..base import GpuHolder, GpuInfo, NodeInfo, NodeJob
from .manifests import GPU_RESOURCE, LABEL_JOB
from .status import rank_of

GPU_PRODUCT = "nvidia.com/gpu.product"  # set by NVIDIA's GPU feature discovery
GPU_MEMORY_MIB = "nvidia.com/gpu.memory"


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
               warnings: list[str]) -> None:  # fmt: skip
    """SpecError when ``spec.workers`` pods of ``spec.gpus`` GPUs each can never be placed
    on the nodes (allocatable GPUs, node selector, cordoned nodes left out), whatever else
    runs; a warning when the cluster lists no nodes."""
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
