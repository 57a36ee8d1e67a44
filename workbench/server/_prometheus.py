"""Prometheus text exposition for ``{base_url}workbench/metrics``: jobs by state, GPU gauges.

Built with prometheus_client (a jupyter_server dependency) on a private registry per
scrape, so nothing leaks into the server's own /metrics and no stale series linger.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from ._gpu import GpuMonitor

# GpuSample fields that are labels, not values.
GPU_LABELS = ("index", "uuid", "name")
# generate_latest writes the classic text format; say so, so every Prometheus parses it.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _WorkbenchCollector:
    """One scrape's worth of gauges."""

    def __init__(self, counts: dict[str, int], gpu: GpuMonitor) -> None:
        self.counts = counts
        self.gpu = gpu

    def collect(self) -> Iterator[Metric]:
        """Yield the job and GPU metric families."""
        jobs = GaugeMetricFamily(
            "workbench_jobs", "Jobs known to workbench, by status", labels=["status"]
        )
        for status, n in sorted(self.counts.items()):
            jobs.add_metric([status], n)
        yield jobs
        state = self.gpu.state
        up = GaugeMetricFamily(
            "workbench_gpu_monitor_up",
            "1 when the GPU monitor is sampling, 0 otherwise (label state says why)",
            labels=["state"],
        )
        samples = self.gpu.latest()
        up.add_metric([state], 1 if samples else 0)
        yield up
        families: dict[str, GaugeMetricFamily] = {}
        for sample in samples:
            labels = [str(sample.get(k, "")) for k in GPU_LABELS]
            for key, value in sample.items():
                if (
                    key in GPU_LABELS
                    or isinstance(value, bool)
                    or not isinstance(value, (int, float))
                ):
                    continue  # None (NotSupported on this GPU) and text are not gauges
                family = families.get(key)
                if family is None:
                    family = families[key] = GaugeMetricFamily(
                        f"workbench_gpu_{_metric_name(key)}",
                        f"GPU sample field {key}",
                        labels=list(GPU_LABELS),
                    )
                family.add_metric(labels, float(value))
        yield from families.values()
        alerts = GaugeMetricFamily("workbench_gpu_alerts", "GPU alerts currently raised")
        alerts.add_metric([], len(self.gpu.alerts()))
        yield alerts


def _metric_name(key: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in key.lower())


def render_metrics(counts: dict[str, Any], gpu: GpuMonitor) -> tuple[str, str]:
    """The exposition text and its content type."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_WorkbenchCollector(counts, gpu))
    return generate_latest(registry).decode(), CONTENT_TYPE
