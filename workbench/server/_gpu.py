"""The server's one view of the host's GPUs: a thin adapter over the monitor's host sampler.

The sampler (``workbench.monitor.sampler.get_host_sampler``) owns NVML and its thread; the
server only reads from it and subscribes once, so no client ever polls NVML. When the
sampler is missing or NVML is unusable, every read says why instead of failing.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from ..errors import MonitorUnavailableError

log = logging.getLogger(__name__)

UNAVAILABLE = "unavailable"


def _plain(value: Any) -> Any:
    """A JSON-ready form of a sample, alert or enum."""
    if hasattr(value, "to_dict"):
        return value.to_dict()
    return getattr(value, "value", value)


class GpuMonitor:
    """Starts the host sampler on first use and answers reads from its memory."""

    def __init__(
        self,
        interval: float | None = None,
        temperature_alert: float | None = None,
        memory_alert: float | None = None,
    ) -> None:
        self.interval = interval
        self.temperature_alert = temperature_alert
        self.memory_alert = memory_alert
        self._lock = threading.Lock()
        self._started = False
        self._sampler: Any = None
        self._reason: str | None = None

    def start(self) -> None:
        """Get (and start) the host sampler once; remember why when there is none."""
        with self._lock:
            if self._started:
                return
            self._started = True
            try:
                from ..monitor.sampler import get_host_sampler
            except ImportError:
                self._reason = _inventory_reason() or (
                    "GPU sampling is not part of this workbench install (workbench.monitor.sampler)"
                )
                return
            try:
                self._sampler = get_host_sampler()
                self._configure(self._sampler)
                self._sampler.start()
            except MonitorUnavailableError as e:
                self._reason = e.reason

    def _configure(self, sampler: Any) -> None:
        """Apply the server's configured interval and alert thresholds (None: keep the
        monitor's own, which honours WORKBENCH_GPU_ALERTS)."""
        if self.interval is not None:
            sampler.interval = self.interval  # read by the sampling loop on every tick
        engine = getattr(sampler, "engine", None)
        rules = getattr(engine, "rules", None)
        if (
            engine is None
            or rules is None
            or (self.temperature_alert is None and self.memory_alert is None)
        ):
            return
        values = dataclasses.asdict(rules)
        if self.temperature_alert is not None:
            values["temperature_c"] = self.temperature_alert
            values["temperature_clear_c"] = min(
                rules.temperature_clear_c, self.temperature_alert - 5
            )
        if self.memory_alert is not None:
            values["memory_pct"] = self.memory_alert
            values["memory_clear_pct"] = min(rules.memory_clear_pct, self.memory_alert - 5)
        engine.rules = type(rules)(**values)

    def stop(self) -> None:
        """Stop the sampler this server started."""
        with self._lock:
            sampler, self._sampler, self._started = self._sampler, None, False
        if sampler is not None:
            sampler.stop()

    @property
    def state(self) -> str:
        """The monitor's state in one word (``unavailable`` when there is no sampler)."""
        self.start()
        if self._sampler is None:
            return UNAVAILABLE
        return str(_plain(self._sampler.state))

    @property
    def reason(self) -> str | None:
        """Why monitoring is not running, in plain words (None when it is)."""
        self.start()
        if self._sampler is None:
            return self._reason
        return getattr(self._sampler, "reason", None) or None

    def latest(self) -> list[dict[str, Any]]:
        """The newest sample of each GPU."""
        self.start()
        return [] if self._sampler is None else [_plain(s) for s in self._sampler.latest()]

    def alerts(self) -> list[dict[str, Any]]:
        """Alerts the monitor currently raises."""
        self.start()
        return [] if self._sampler is None else [_plain(a) for a in self._sampler.alerts()]

    def history(self, seconds: float | None) -> dict[str, list[dict[str, Any]]]:
        """Samples of each GPU over the last ``seconds``, keyed by GPU index."""
        out: dict[str, list[dict[str, Any]]] = {}
        for sample in self.latest():
            index = sample.get("index")
            if index is None:
                continue
            samples = self._sampler.history(index, seconds=seconds)
            out[str(index)] = [_plain(s) for s in samples]
        return out

    def snapshot(self, seconds: float | None, with_history: bool = True) -> dict[str, Any]:
        """Everything GET gpus returns: state, reason, latest samples, history, alerts."""
        return {
            "state": self.state,
            "reason": self.reason,
            "gpus": self.latest(),
            "history": self.history(seconds) if with_history else {},
            "alerts": self.alerts(),
        }

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None] | None:
        """Call ``callback`` (from the sampler's thread) after each new sample."""
        self.start()
        if self._sampler is None:
            return None
        unsubscribe: Callable[[], None] = self._sampler.subscribe(lambda *_args, **_kw: callback())
        return unsubscribe


def _inventory_reason() -> str | None:
    """Why this host has no usable GPUs, or None when NVML answers."""
    from ..monitor import gpu_inventory

    try:
        gpu_inventory()
    except MonitorUnavailableError as e:
        return e.reason
    return None
