"""GPU monitoring through NVML. The only package that imports pynvml."""

from __future__ import annotations

from .inventory import GpuInfo, gpu_inventory

__all__ = ["GpuInfo", "gpu_inventory"]
