"""Fractions of a GPU on a cluster: the extended resources a pod asks for, per sharing
scheme (config ``kubernetes.gpu_sharing``), and what a node's shares are. Pure.

* gpushare (Alibaba ACK's cGPU / gpushare scheduler extender): ``aliyun.com/gpu-mem`` in
  GiB; the node advertises its total GiB and ``aliyun.com/gpu-count``; the extender puts
  the GPU index it picked in the pod's ``ALIYUN_COM_GPU_MEM_IDX`` annotation.
* hami (Project-HAMi): ``nvidia.com/gpu: 1`` (one vGPU) with ``nvidia.com/gpumem`` in MiB
  and ``nvidia.com/gpucores`` in percent of the GPU's cores.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ...catalog import InstanceSpec
from ...errors import SpecError

GPU_RESOURCE = "nvidia.com/gpu"
SCHEMES = ("none", "gpushare", "hami")
GPUSHARE_MEM = "aliyun.com/gpu-mem"  # GiB
GPUSHARE_COUNT = "aliyun.com/gpu-count"
GPUSHARE_INDEX = "ALIYUN_COM_GPU_MEM_IDX"  # pod annotation: the GPU the extender picked
HAMI_MEM = "nvidia.com/gpumem"  # MiB
HAMI_CORES = "nvidia.com/gpucores"  # percent
SHARE_RESOURCES = (GPUSHARE_MEM, HAMI_MEM, HAMI_CORES)
_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "K": 10**3, "M": 10**6,
          "G": 10**9, "T": 10**12, "": 1}  # fmt: skip


def gpu_bytes(offer: InstanceSpec) -> int | None:
    """Memory of one whole GPU of ``offer`` (a shared spec lists its share's memory)."""
    if not offer.gpu_memory or not offer.gpus:
        return None
    text = str(offer.gpu_memory).strip()
    unit = text.lstrip("0123456789.")
    try:
        share = float(text[: len(text) - len(unit)]) * _UNITS[unit]
    except (KeyError, ValueError):
        return None
    # gpu.0.5x lists 12Gi for half an A10: the whole GPU has 12Gi / 0.5.
    return int(share / offer.gpus) if offer.gpus < 1 else int(share)


def gpu_limits(gpus: float, offer: InstanceSpec, scheme: str) -> dict[str, str]:
    """The container limits for ``gpus`` GPUs per worker (whole, or a fraction of one)."""
    if gpus == int(gpus):
        return {GPU_RESOURCE: str(int(gpus))}
    if scheme not in ("gpushare", "hami"):
        raise SpecError("gpus", f"{gpus:g} is a fraction of a GPU, and kubernetes.gpu_sharing "
                        f"is {scheme}", "set kubernetes.gpu_sharing to gpushare (ACK) or hami in "
                        "the workbench config, or ask for whole GPUs, e.g. --gpus 1")  # fmt: skip
    whole = gpu_bytes(offer)
    if whole is None:
        raise SpecError("spec", f"instance spec {offer.name} gives no gpu_memory, so a share "
                        "of its GPU cannot be sized", "pick a spec with gpu_memory, e.g. gpu.0.5x")  # fmt: skip
    if scheme == "gpushare":
        return {GPUSHARE_MEM: str(max(1, math.ceil(gpus * whole / 2**30)))}
    return {GPU_RESOURCE: "1", HAMI_MEM: str(max(1, math.ceil(gpus * whole / 2**20))),
            HAMI_CORES: str(max(1, round(gpus * 100)))}  # fmt: skip


def check_scheme(value: Any, where: str) -> str:
    """A gpu_sharing value or SpecError on ``where``."""
    if value not in SCHEMES:
        raise SpecError(
            where, f"unknown GPU sharing scheme {value!r}", f"use one of {', '.join(SCHEMES)}"
        )
    return str(value)


def share_of(limits: Mapping[str, Any], per_gpu_bytes: int | None,
             quantity: Any) -> float | None:  # fmt: skip
    """The part of one GPU a container's limits hold under a sharing scheme (None: it
    asks for no share). gpushare and HAMi memory over the GPU's memory; HAMi cores when
    the memory is unknown."""
    if GPUSHARE_MEM in limits and per_gpu_bytes:
        return float(quantity(limits[GPUSHARE_MEM])) * 2**30 / per_gpu_bytes
    if HAMI_MEM in limits and per_gpu_bytes:
        return float(quantity(limits[HAMI_MEM])) * 2**20 / per_gpu_bytes
    if HAMI_CORES in limits:
        return float(quantity(limits[HAMI_CORES])) / 100
    return None
