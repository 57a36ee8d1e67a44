"""Which GPUs this host has, read through the NVML seam (used to place local jobs)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import MonitorUnavailableError
from . import _nvml


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as NVML names it."""

    index: int
    uuid: str
    name: str
    memory_total: int  # bytes


def gpu_inventory() -> list[GpuInfo]:
    """The host's GPUs; raises MonitorUnavailableError saying plainly why there are none."""
    try:
        nv = _nvml.init()
    except _nvml.NvmlUnavailable as e:
        raise MonitorUnavailableError(e.reason) from None
    try:
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            gpus.append(
                GpuInfo(
                    index=i,
                    uuid=_nvml.text(nv.nvmlDeviceGetUUID(h)),
                    name=_nvml.text(nv.nvmlDeviceGetName(h)),
                    memory_total=int(nv.nvmlDeviceGetMemoryInfo(h).total),
                )
            )
    except nv.NVMLError as e:
        raise MonitorUnavailableError(f"NVML could not list the GPUs: {e}") from None
    if not gpus:
        raise MonitorUnavailableError("the NVIDIA driver reports no GPUs on this host")
    return gpus
