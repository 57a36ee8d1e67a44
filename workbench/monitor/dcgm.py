"""GPU figures from NVIDIA's DCGM exporter (Prometheus text) instead of local NVML.

Where the GPUs are not this process's to open (a cluster node watched from the Jupyter
server, a DCGM exporter DaemonSet already running), point workbench at the exporter:
``WORKBENCH_GPU_SOURCE=dcgm:http://HOST:9400/metrics``. The same HostSampler machinery
(history, alerts, subscribers) then runs on the exporter's figures.
"""

from __future__ import annotations

import base64
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from ._nvml import MonitorState
from .sampler import GpuSample, HostSampler

MIB = 1024 * 1024

# DCGM field -> (GpuSample attribute, factor). Names are the exporter's default counters.
FIELDS: dict[str, tuple[str, float]] = {
    "DCGM_FI_DEV_GPU_UTIL": ("utilization", 1.0),
    "DCGM_FI_DEV_FB_USED": ("memory_used", MIB),
    "DCGM_FI_DEV_GPU_TEMP": ("temperature", 1.0),
    "DCGM_FI_DEV_POWER_USAGE": ("power", 1.0),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock", 1.0),
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": ("ecc_errors", 1.0),
    "DCGM_FI_DEV_XID_ERRORS": ("xid", 1.0),
}
INTEGER_FIELDS = {"memory_used", "memory_total", "sm_clock", "ecc_errors", "xid"}


def redact_url(url: str) -> str:
    """The URL without user:password@ (exporters behind basic auth)."""
    return re.sub(r"//[^/@]*@", "//***@", url)


def parse_exposition(text: str, hostname: str | None = None) -> dict[int, dict[str, Any]]:
    """Per GPU index the exporter's figures, in GpuSample units (bytes, W, C, MHz)."""
    from prometheus_client.parser import text_string_to_metric_families

    gpus: dict[int, dict[str, Any]] = {}
    free: dict[int, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if hostname and labels.get("Hostname") not in (None, hostname):
                continue
            try:
                index = int(labels["gpu"])
            except (KeyError, ValueError):
                continue
            gpu = gpus.setdefault(
                index, {"uuid": labels.get("UUID", ""), "name": labels.get("modelName", "")}
            )
            if sample.name == "DCGM_FI_DEV_FB_FREE":
                free[index] = sample.value
            elif sample.name in FIELDS:
                attr, factor = FIELDS[sample.name]
                value = sample.value * factor
                gpu[attr] = int(value) if attr in INTEGER_FIELDS else float(value)
    for index, mib in free.items():
        used = gpus[index].get("memory_used")
        if used is not None:
            gpus[index]["memory_total"] = int(used + mib * MIB)
    return gpus


class DcgmExporterSampler(HostSampler):
    """A HostSampler whose readings come from a DCGM exporter's /metrics endpoint."""

    def __init__(
        self, url: str, *, timeout: float = 2.0, hostname: str | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.url = url
        self.timeout = timeout
        self.hostname = hostname
        # Our own opener: no proxy from the environment between us and a node exporter.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._seen: dict[int, tuple[str, str]] = {}
        self._last_xid: dict[int, int] = {}
        self._usable = False

    def open(self) -> bool:
        """Usable once the URL and parser check out; a scrape failing later is a state
        (ERROR with the reason) that the next good scrape clears, not the end of sampling."""
        if not self._opened:
            self._usable = super().open()
        return self._usable

    def _open_source(self) -> bool:
        try:
            import prometheus_client.parser  # noqa: F401
        except ImportError:
            return self._off(
                MonitorState.NO_LIBRARY,
                "reading a DCGM exporter needs prometheus-client "
                "(pip install 'jupyter-gpu-workbench[gpu]')",
            )
        if not re.match(r"^https?://", self.url):
            return self._off(
                MonitorState.ERROR,
                f"the DCGM exporter URL {redact_url(self.url)!r} is not http(s)://HOST:PORT/metrics",
            )
        return True

    def _request(self) -> urllib.request.Request:
        """GET the URL; user:password@ in it becomes basic auth (urllib takes no userinfo)."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.username is None:
            return urllib.request.Request(self.url)
        netloc = parts.hostname or ""
        if parts.port:
            netloc += f":{parts.port}"
        plain = urllib.parse.urlunsplit(parts._replace(netloc=netloc))
        token = base64.b64encode(f"{parts.username}:{parts.password or ''}".encode()).decode()
        return urllib.request.Request(plain, headers={"Authorization": f"Basic {token}"})

    def _collect(self, now: float, slow: bool) -> list[GpuSample]:
        try:
            with self._opener.open(self._request(), timeout=self.timeout) as response:
                text = response.read().decode("utf-8", "replace")
            figures = parse_exposition(text, self.hostname)
        except (urllib.error.URLError, OSError, ValueError) as e:
            why = getattr(e, "reason", None) or e
            self.state = MonitorState.ERROR
            self.reason = f"cannot read the DCGM exporter at {redact_url(self.url)}: {why}"
            return [
                GpuSample(i, uuid, name, now, error=self.reason)
                for i, (uuid, name) in sorted(self._seen.items())
            ]
        if not figures:
            self.state = MonitorState.NO_GPU
            self.reason = f"the DCGM exporter at {redact_url(self.url)} reports no GPUs"
        else:
            self.state, self.reason = MonitorState.OK, ""
        samples = []
        for index, f in sorted(figures.items()):
            if self.indices is not None and index not in self.indices:
                continue
            self._seen[index] = (f.pop("uuid"), f.pop("name"))
            s = GpuSample(index, *self._seen[index], now)
            for attr, value in f.items():
                setattr(s, attr, value)
            # The exporter repeats the last XID; report it once, when it changes.
            xid = s.xid or 0
            s.xid = xid if xid and xid != self._last_xid.get(index) else None
            self._last_xid[index] = xid
            samples.append(s)
        for index, (uuid, name) in sorted(self._seen.items()):
            if index not in figures:
                msg = f"GPU {index} is no longer reported by the DCGM exporter"
                samples.append(GpuSample(index, uuid, name, now, error=msg))
        return samples
