"""A stand-in for NVIDIA's dcgm-exporter: its /metrics Prometheus text on 127.0.0.1.

The real exporter needs GPUs and DCGM; this one speaks the same wire format (HTTP GET,
text exposition with the exporter's metric and label names), keeps per-GPU state that
tests change between scrapes, and can inject faults (HTTP errors, a vanished GPU).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HELP = {
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Framebuffer memory used (in MiB)."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Framebuffer memory free (in MiB)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM frequency (in MHz)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
}


class FakeDcgmExporter:
    """Serves /metrics for a set of GPUs whose figures tests set as they go."""

    def __init__(self, hostname: str = "node-a") -> None:
        self.hostname = hostname
        self.gpus: dict[int, dict[str, Any]] = {}
        self.fail_with: int | None = None
        self.scrapes = 0
        self._lock = threading.Lock()
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with exporter._lock:
                    exporter.scrapes += 1
                    status = exporter.fail_with
                    body = exporter.render().encode()
                if self.path != "/metrics":
                    status = 404
                if status:
                    self.send_error(status)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def add_gpu(self, index: int, **figures: float) -> None:
        """Add (or replace) a GPU with DCGM field values, e.g. DCGM_FI_DEV_GPU_TEMP=60."""
        with self._lock:
            self.gpus[index] = {
                "uuid": f"GPU-fake-{index:04d}",
                "model": "NVIDIA A100-SXM4-80GB",
                **figures,
            }

    def set(self, index: int, **figures: float) -> None:
        """Change some of a GPU's figures."""
        with self._lock:
            self.gpus[index].update(figures)

    def drop_gpu(self, index: int) -> None:
        """The GPU disappears from the exporter's output (fell off the bus)."""
        with self._lock:
            self.gpus.pop(index, None)

    def render(self) -> str:
        """The exposition text, as dcgm-exporter writes it."""
        lines = []
        for name, (kind, text) in HELP.items():
            rows = [(i, g) for i, g in sorted(self.gpus.items()) if name in g]
            if not rows:
                continue
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            for i, g in rows:
                labels = (
                    f'gpu="{i}",UUID="{g["uuid"]}",device="nvidia{i}",modelName="{g["model"]}",'
                    f'Hostname="{self.hostname}",DCGM_FI_DRIVER_VERSION="570.86.15"'
                )
                lines.append(f"{name}{{{labels}}} {g[name]}")
        return "\n".join(lines) + "\n"

    def __enter__(self) -> FakeDcgmExporter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join()
