"""GPU monitoring through NVML. The only package that imports pynvml (through ``_nvml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .alerts import Alert, AlertRules
from .inventory import GpuInfo, gpu_inventory
from .sampler import GpuSample, HostSampler, MonitorState, get_host_sampler
from .stream import METRIC_PREFIX, format_metric_line, split_metric_lines

__all__ = [
    "METRIC_PREFIX",
    "Alert",
    "AlertRules",
    "GpuInfo",
    "GpuSample",
    "HostSampler",
    "MonitorState",
    "format_metric_line",
    "get_host_sampler",
    "gpu_inventory",
    "job_metrics",
    "live_figures",
    "split_metric_lines",
]

LIVE_KEYS = ("utilization", "memory_used", "temperature")


def job_metrics(job_dir: str | Path) -> list[dict[str, Any]]:
    """A job's recorded GPU samples (JOB_DIR/metrics/gpu.jsonl), oldest first."""
    from .metrics import GPU_FILE, metrics_dir, read_jsonl

    return read_jsonl(metrics_dir(job_dir) / GPU_FILE)


def live_figures() -> dict[int, dict[str, Any]]:
    """Per GPU index the latest utilisation, memory used and temperature ({} when none)."""
    return {s.index: {k: getattr(s, k) for k in LIVE_KEYS} for s in get_host_sampler().latest()}
