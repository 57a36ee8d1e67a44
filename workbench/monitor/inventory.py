"""Which GPUs this host has, read once through NVML (used to place local jobs)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import MonitorUnavailableError


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as NVML names it."""

    index: int
    uuid: str
    name: str
    memory_total: int  # bytes


def _reason(e: Exception) -> str:
    import pynvml

    if isinstance(e, pynvml.NVMLError_LibraryNotFound):
        return "no NVIDIA driver on this host (NVML library not found)"
    if isinstance(e, getattr(pynvml, "NVMLError_DriverNotLoaded", ())):
        return "the NVIDIA driver is installed but not loaded"
    if isinstance(e, getattr(pynvml, "NVMLError_NoPermission", ())):
        return "no permission to read the GPUs through NVML"
    return f"NVML is not usable here: {e}"


def gpu_inventory() -> list[GpuInfo]:
    """The host's GPUs; raises MonitorUnavailableError saying plainly why there are none."""
    try:
        import pynvml
    except ImportError:  # pragma: no cover - it is a core dependency
        raise MonitorUnavailableError(
            "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
        ) from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise MonitorUnavailableError(_reason(e)) from None
    try:
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            uuid = pynvml.nvmlDeviceGetUUID(h)
            mem = pynvml.nvmlDeviceGetMemoryInfo(h)
            gpus.append(
                GpuInfo(
                    index=i,
                    uuid=uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    name=name.decode() if isinstance(name, bytes) else str(name),
                    memory_total=int(mem.total),
                )
            )
        if not gpus:
            raise MonitorUnavailableError("the NVIDIA driver reports no GPUs on this host")
        return gpus
    except pynvml.NVMLError as e:
        raise MonitorUnavailableError(_reason(e)) from None
    finally:
        try:
            pynvml.nvmlShutdown()
        except pynvml.NVMLError:
            pass
