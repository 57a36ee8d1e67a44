"""Alert rules over GPU samples: each alert fires once and clears with hysteresis.

Level rules (temperature, memory, idle GPU while a job runs) fire when a value crosses
the threshold and clear only once it is back past a lower clear threshold, so a value
wobbling around the line does not flap. Event rules (XID, ECC, a lost GPU) fire on the
event and clear when the GPU has been quiet (or back) for a while.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from ..errors import SpecError

if TYPE_CHECKING:
    from .sampler import GpuSample

ENV_RULES = "WORKBENCH_GPU_ALERTS"


@dataclass
class AlertRules:
    """Thresholds of the GPU alert rules (override with WORKBENCH_GPU_ALERTS="k=v,...")."""

    temperature_c: float = 85.0
    temperature_clear_c: float = 80.0
    memory_pct: float = 95.0
    memory_clear_pct: float = 90.0
    # Idle while a job holds the GPU: paid for but wasted. Only job-level samplers watch it.
    idle_pct: float = 5.0
    idle_clear_pct: float = 10.0
    idle_seconds: float = 600.0
    xid: bool = True
    ecc: bool = True
    # How long an XID alert stays active after the last XID event on that GPU.
    event_clear_seconds: float = 300.0

    def __post_init__(self) -> None:
        if self.temperature_clear_c > self.temperature_c:
            raise SpecError("alerts.temperature_clear_c", "is above temperature_c", "make it lower")
        if self.memory_clear_pct > self.memory_pct:
            raise SpecError("alerts.memory_clear_pct", "is above memory_pct", "make it lower")
        if self.idle_clear_pct < self.idle_pct:
            raise SpecError("alerts.idle_clear_pct", "is below idle_pct", "make it higher")

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> AlertRules:
        """Rules from a mapping; unknown names and non-numbers raise SpecError naming the field."""
        known = {f.name: f for f in fields(cls)}
        out: dict[str, Any] = {}
        for key, raw in values.items():
            if key not in known:
                raise SpecError(
                    f"alerts.{key}", "unknown alert setting", f"known: {', '.join(known)}"
                )
            if known[key].type == "bool":
                out[key] = str(raw).strip().lower() in ("1", "true", "yes", "on")
                continue
            try:
                out[key] = float(raw)
            except (TypeError, ValueError):
                raise SpecError(
                    f"alerts.{key}", f"{raw!r} is not a number", "give a number"
                ) from None
        return cls(**out)

    @classmethod
    def from_env(cls) -> AlertRules:
        """Rules from WORKBENCH_GPU_ALERTS, e.g. "temperature_c=80,idle_seconds=300"."""
        spec = os.environ.get(ENV_RULES, "").strip()
        if not spec:
            return cls()
        values = {}
        for part in spec.split(","):
            key, sep, value = part.partition("=")
            if not sep:
                raise SpecError(ENV_RULES, f"{part!r} is not NAME=VALUE", "e.g. temperature_c=80")
            values[key.strip()] = value.strip()
        return cls.from_dict(values)


@dataclass
class Alert:
    """One alert on one GPU; ``cleared`` is None while it is active."""

    kind: str  # temperature | memory | idle | xid | ecc | gpu_lost
    gpu: int
    uuid: str
    level: str  # warning | error
    message: str
    value: float | None
    threshold: float | None
    since: float
    cleared: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """Wire form."""
        return asdict(self)


class AlertEngine:
    """Applies AlertRules to successive samples and remembers what is active."""

    def __init__(self, rules: AlertRules | None = None, watch_idle: bool = False) -> None:
        self.rules = rules or AlertRules()
        self.watch_idle = watch_idle
        self._active: dict[tuple[int, str], Alert] = {}
        self._idle_since: dict[int, float] = {}
        self._ecc_baseline: dict[int, int] = {}
        self._last_xid: dict[int, float] = {}

    def active(self) -> list[Alert]:
        """Alerts that fired and have not cleared, oldest first."""
        return sorted(self._active.values(), key=lambda a: a.since)

    def update(self, samples: list[GpuSample], now: float | None = None) -> list[Alert]:
        """Evaluate one round of samples; returns alerts that fired or cleared in it."""
        now = time.time() if now is None else now
        changed: list[Alert] = []
        for s in samples:
            changed += self._one(s, now)
        return changed

    def _one(self, s: GpuSample, now: float) -> list[Alert]:
        r = self.rules
        out: list[Alert] = []
        # A lost GPU has no other readings worth judging.
        lost = s.error is not None
        out += self._level(s, now, "gpu_lost", lost, not lost, "error", None, None,
                           str(s.error))  # fmt: skip
        if lost:
            return out
        t = s.temperature
        if t is not None:
            out += self._level(s, now, "temperature", t >= r.temperature_c, t <= r.temperature_clear_c,
                               "warning", t, r.temperature_c,
                               f"GPU {s.index} is at {t:g} C (alert at {r.temperature_c:g} C)")  # fmt: skip
        if s.memory_used is not None and s.memory_total:
            pct = 100.0 * s.memory_used / s.memory_total
            out += self._level(s, now, "memory", pct >= r.memory_pct, pct <= r.memory_clear_pct,
                               "warning", round(pct, 1), r.memory_pct,
                               f"GPU {s.index} memory is {pct:.0f}% full (alert at {r.memory_pct:g}%)")  # fmt: skip
        if self.watch_idle and s.utilization is not None:
            u = s.utilization
            if u < r.idle_pct:
                self._idle_since.setdefault(s.index, s.time)
            else:
                self._idle_since.pop(s.index, None)
            start = self._idle_since.get(s.index)
            idle_for = (s.time - start) if start is not None else 0.0
            out += self._level(s, now, "idle", idle_for >= r.idle_seconds, u >= r.idle_clear_pct,
                               "warning", u, r.idle_pct,
                               f"GPU {s.index} has been under {r.idle_pct:g}% busy for "
                               f"{idle_for / 60:.0f} min while the job runs (paid but idle)")  # fmt: skip
        if r.xid:
            if s.xid is not None:
                self._last_xid[s.index] = s.time
            quiet = s.time - self._last_xid.get(s.index, s.time) >= r.event_clear_seconds
            out += self._level(s, now, "xid", s.xid is not None, quiet, "error", s.xid, None,
                               f"GPU {s.index} reported XID error {s.xid}")  # fmt: skip
        if r.ecc and s.ecc_errors is not None:
            base = self._ecc_baseline.setdefault(s.index, s.ecc_errors)
            new = s.ecc_errors - base
            if new < 0:  # the counter was reset (GPU reset): start again from here
                self._ecc_baseline[s.index] = s.ecc_errors
                new = 0
            out += self._level(s, now, "ecc", new > 0, new == 0, "error", new, None,
                               f"GPU {s.index} has {new} new uncorrected ECC error(s)")  # fmt: skip
        return out

    def _level(
        self, s: GpuSample, now: float, kind: str, fire: bool, clear: bool, level: str,
        value: float | None, threshold: float | None, message: str,
    ) -> list[Alert]:  # fmt: skip
        key = (s.index, kind)
        current = self._active.get(key)
        if current is None and fire:
            alert = Alert(kind, s.index, s.uuid, level, message, value, threshold, now)
            self._active[key] = alert
            return [alert]
        if current is not None and clear and not fire:
            del self._active[key]
            current.cleared = now
            return [current]
        return []
