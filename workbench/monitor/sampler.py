"""One NVML sampler per host process, serving every viewer: latest figures, history, alerts.

Fast fields (utilisation, memory, temperature, power, SM clock, XID events) are read every
``interval`` seconds; slow or expensive ones (process lists take a driver-wide lock, ECC
counters, the power limit) every ``slow_interval``; static ones (name, UUID) once. A field
NVML does not support on a board (MIG, consumer cards) is None and is not asked again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from . import _nvml
from ._nvml import MonitorState, NvmlUnavailable
from .alerts import Alert, AlertEngine, AlertRules

log = logging.getLogger(__name__)

ENV_SWITCH = "WORKBENCH_GPU_MONITOR"

__all__ = ["Alert", "AlertRules", "GpuSample", "HostSampler", "MonitorState", "get_host_sampler"]


@dataclass(slots=True)
class GpuSample:
    """One reading of one GPU; a field is None where NVML does not report it."""

    index: int
    uuid: str
    name: str
    time: float
    utilization: float | None = None  # percent of the last sample period the GPU was busy
    memory_used: int | None = None  # bytes
    memory_total: int | None = None  # bytes
    temperature: float | None = None  # degrees C
    power: float | None = None  # W
    power_limit: float | None = None  # W (enforced limit)
    sm_clock: int | None = None  # MHz
    processes: list[dict[str, Any]] | None = None  # [{"pid": int, "memory": bytes | None}]
    ecc_errors: int | None = None  # volatile uncorrected ECC errors since the driver loaded
    xid: int | None = None  # XID error code seen since the previous sample
    error: str | None = None  # set when the GPU stopped answering (e.g. fell off the bus)

    def to_dict(self) -> dict[str, Any]:
        """Wire form (JSON-ready)."""
        return {f: getattr(self, f) for f in SAMPLE_FIELDS}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuSample:
        """Inverse of to_dict; unknown keys (e.g. "rank") are ignored."""
        return cls(**{k: d[k] for k in SAMPLE_FIELDS if k in d})


SAMPLE_FIELDS = tuple(f.name for f in fields(GpuSample))


@dataclass
class _Device:
    """What the sampler keeps per GPU between samples."""

    index: int
    handle: Any = None
    uuid: str = ""
    name: str = ""
    unsupported: set[str] = field(default_factory=set)
    events: Any = None  # NVML event set registered for XID errors
    lost: str | None = None
    present: bool = True  # False: the index is past the host's GPU count (never retried)
    processes: list[dict[str, Any]] | None = None
    power_limit: float | None = None
    ecc_errors: int | None = None


class HostSampler:
    """Samples the host's GPUs on a daemon thread; one per process serves every viewer."""

    def __init__(
        self,
        interval: float = 1.0,
        slow_interval: float = 10.0,
        history_seconds: int = 3600,
        *,
        coarse_seconds: float = 60.0,
        coarse_history_seconds: float = 24 * 3600.0,
        rules: AlertRules | None = None,
        indices: list[int] | None = None,
        watch_idle: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval = interval
        self.slow_interval = slow_interval
        self.coarse_seconds = coarse_seconds
        self.indices = indices
        self.state = MonitorState.OK
        self.reason = ""
        self.engine = AlertEngine(rules or AlertRules.from_env(), watch_idle=watch_idle)
        self._clock = clock
        self._fine_len = max(1, int(history_seconds / interval))
        self._coarse_len = max(1, int(coarse_history_seconds / coarse_seconds))
        self._devices: list[_Device] = []
        self._fine: dict[int, deque[GpuSample]] = {}
        self._coarse: dict[int, deque[GpuSample]] = {}
        self._bucket: dict[int, list[GpuSample]] = {}
        self._latest: list[GpuSample] = []
        self._subscribers: list[Callable[[list[GpuSample]], None]] = []
        self._alert_subscribers: list[Callable[[Alert], None]] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._opened = False
        self._next_slow = 0.0

    # ---- lifecycle ----------------------------------------------------------------------
    def open(self) -> bool:
        """Initialise NVML and find the GPUs; False (with state and reason set) when it cannot."""
        if self._opened:
            return self.state is MonitorState.OK
        self._opened = True
        if os.environ.get(ENV_SWITCH, "1").strip().lower() in ("0", "false", "off", "no"):
            return self._off(
                MonitorState.DISABLED, f"GPU monitoring is switched off ({ENV_SWITCH}=0)"
            )
        return self._open_source()

    def _open_source(self) -> bool:
        """Initialise NVML and attach the GPUs (a subclass reads another source)."""
        try:
            nv = _nvml.init()
        except NvmlUnavailable as e:
            return self._off(e.state, e.reason)
        try:
            count = int(nv.nvmlDeviceGetCount())
        except nv.NVMLError as e:
            return self._off(MonitorState.ERROR, f"NVML could not count the GPUs: {e}")
        if count == 0:
            return self._off(MonitorState.NO_GPU, "the NVIDIA driver reports no GPUs on this host")
        wanted = list(range(count)) if self.indices is None else list(self.indices)
        for i in wanted:
            dev = _Device(i)
            if i >= count:
                dev.lost, dev.present = f"GPU {i} is not present (this host has {count})", False
            else:
                self._attach(nv, dev)
            self._devices.append(dev)
            self._fine[i] = deque(maxlen=self._fine_len)
            self._coarse[i] = deque(maxlen=self._coarse_len)
        return True

    def _off(self, state: MonitorState, reason: str) -> bool:
        self.state, self.reason = state, reason
        return False

    def _attach(self, nv: Any, dev: _Device) -> None:
        """Read the static fields and register for XID events; marks the GPU lost on failure."""
        try:
            dev.handle = nv.nvmlDeviceGetHandleByIndex(dev.index)
            uuid = _nvml.text(nv.nvmlDeviceGetUUID(dev.handle))
            if dev.uuid and uuid != dev.uuid:
                dev.lost = f"GPU {dev.index} is now a different board ({uuid})"
                return
            dev.uuid, dev.name = uuid, _nvml.text(nv.nvmlDeviceGetName(dev.handle))
            dev.lost = None
        except nv.NVMLError as e:
            dev.lost = f"GPU {dev.index} is not answering NVML ({e})"
            return
        if dev.events is None:
            try:
                es = nv.nvmlEventSetCreate()
                nv.nvmlDeviceRegisterEvents(dev.handle, nv.nvmlEventTypeXidCriticalError, es)
                dev.events = es
            except nv.NVMLError:
                dev.events = None  # no XID events on this board or without privilege

    def start(self) -> None:
        """Open NVML, take a first sample at once, then keep sampling on a daemon thread."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            if not self.open():
                return
            self._stop.clear()
            self.sample()
            self._thread = threading.Thread(
                target=self._run, name="workbench-gpu-sampler", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop sampling and join the thread (NVML stays initialised for the process)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None

    @property
    def running(self) -> bool:
        """True while the sampling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        due = time.monotonic() + self.interval
        while not self._stop.wait(max(0.0, due - time.monotonic())):
            try:
                self.sample()
            except Exception:  # a viewer's bug or an NVML surprise must not end monitoring
                log.exception("GPU sampling failed; trying again next interval")
            due += self.interval
            if due < time.monotonic():  # we fell behind (suspend, overload): do not burst
                due = time.monotonic() + self.interval

    # ---- sampling -----------------------------------------------------------------------
    def sample(self) -> list[GpuSample]:
        """Read every GPU once now; updates history, alerts and subscribers. Public for tests."""
        if not self.open():
            return []
        now = self._clock()
        slow = now >= self._next_slow
        if slow:
            self._next_slow = now + self.slow_interval
        samples = self._collect(now, slow)
        with self._lock:
            self._latest = samples
            for s in samples:
                self._remember(s)
            changed = self.engine.update(samples, now)
            subscribers = list(self._subscribers)
            alert_subscribers = list(self._alert_subscribers)
        for callback in subscribers:
            _call(callback, samples)
        for alert in changed:
            for on_alert in alert_subscribers:
                _call(on_alert, alert)
        return samples

    def _collect(self, now: float, slow: bool) -> list[GpuSample]:
        """One reading of every watched GPU through NVML."""
        nv = _nvml.lib()
        return [self._read(nv, dev, now, slow) for dev in self._devices]

    def _read(self, nv: Any, dev: _Device, now: float, slow: bool) -> GpuSample:
        if dev.lost is not None and dev.present and slow:
            self._attach(nv, dev)  # a reset GPU may come back
        s = GpuSample(dev.index, dev.uuid, dev.name, now)
        if dev.lost is not None:
            s.error = dev.lost
            return s
        try:
            h = dev.handle
            mem = self._get(nv, dev, "memory", nv.nvmlDeviceGetMemoryInfo, h)
            if mem is not None:
                s.memory_used, s.memory_total = int(mem.used), int(mem.total)
            util = self._get(nv, dev, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
            s.utilization = None if util is None else float(util.gpu)
            temp = self._get(
                nv, dev, "temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU
            )
            s.temperature = None if temp is None else float(temp)
            power = self._get(nv, dev, "power", nv.nvmlDeviceGetPowerUsage, h)
            s.power = None if power is None else power / 1000.0
            s.sm_clock = self._get(
                nv, dev, "sm_clock", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM
            )
            if slow:
                self._read_slow(nv, dev)
            s.processes, s.power_limit, s.ecc_errors = (
                dev.processes,
                dev.power_limit,
                dev.ecc_errors,
            )
            s.xid = self._poll_xid(nv, dev)
        except nv.NVMLError_GpuIsLost as e:
            dev.lost = f"GPU {dev.index} fell off the bus ({e})"
            s = GpuSample(dev.index, dev.uuid, dev.name, now, error=dev.lost)
        return s

    def _read_slow(self, nv: Any, dev: _Device) -> None:
        h = dev.handle
        limit = self._get(nv, dev, "power_limit", nv.nvmlDeviceGetEnforcedPowerManagementLimit, h)
        dev.power_limit = None if limit is None else limit / 1000.0
        dev.ecc_errors = self._get(
            nv, dev, "ecc", nv.nvmlDeviceGetTotalEccErrors, h,
            nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC,
        )  # fmt: skip
        procs = self._get(nv, dev, "processes", nv.nvmlDeviceGetComputeRunningProcesses, h)
        dev.processes = (
            None
            if procs is None
            else [{"pid": int(p.pid), "memory": _process_memory(p)} for p in procs]
        )

    def _get(self, nv: Any, dev: _Device, name: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML read; None (and never asked again) when the board does not support it."""
        if name in dev.unsupported:
            return None
        try:
            return fn(*args)
        except nv.NVMLError_NotSupported:
            dev.unsupported.add(name)
            return None
        except nv.NVMLError_GpuIsLost:
            raise
        except nv.NVMLError:  # transient (e.g. Unknown, Timeout): missing this once
            return None

    def _poll_xid(self, nv: Any, dev: _Device) -> int | None:
        if dev.events is None:
            return None
        code = None
        for _ in range(16):  # drain what queued since the last sample
            try:
                data = nv.nvmlEventSetWait_v2(dev.events, 0)
            except nv.NVMLError_GpuIsLost:
                raise
            except nv.NVMLError:  # Timeout: no event waiting
                break
            if data.eventType & nv.nvmlEventTypeXidCriticalError:
                code = int(data.eventData)
        return code

    # ---- history ------------------------------------------------------------------------
    def _remember(self, s: GpuSample) -> None:
        if s.index not in self._fine:  # a source that finds GPUs as it goes (exporters)
            self._fine[s.index] = deque(maxlen=self._fine_len)
            self._coarse[s.index] = deque(maxlen=self._coarse_len)
        self._fine[s.index].append(s)
        bucket = self._bucket.setdefault(s.index, [])
        if bucket and int(bucket[0].time // self.coarse_seconds) != int(
            s.time // self.coarse_seconds
        ):
            self._coarse[s.index].append(_summary(bucket))
            bucket.clear()
        bucket.append(s)

    # ---- what viewers call ----------------------------------------------------------------
    def latest(self) -> list[GpuSample]:
        """The most recent sample of every GPU ([] when monitoring is off)."""
        with self._lock:
            return list(self._latest)

    def history(self, index: int, seconds: float | None = None) -> list[GpuSample]:
        """Samples of GPU ``index``, oldest first: per-interval recently, per-minute beyond."""
        with self._lock:
            fine = list(self._fine.get(index, ()))
            oldest = fine[0].time if fine else float("inf")
            coarse = [c for c in self._coarse.get(index, ()) if c.time < oldest]
        out = coarse + fine
        if seconds is not None and out:
            cut = out[-1].time - seconds
            out = [s for s in out if s.time >= cut]
        return out

    def subscribe(self, callback: Callable[[list[GpuSample]], None]) -> Callable[[], None]:
        """Call ``callback(samples)`` after every sample; returns the unsubscribe function."""
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._subscribers:
                    self._subscribers.remove(callback)

        return unsubscribe

    def subscribe_alerts(self, callback: Callable[[Alert], None]) -> Callable[[], None]:
        """Call ``callback(alert)`` when an alert fires or clears; returns the unsubscribe."""
        with self._lock:
            self._alert_subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                if callback in self._alert_subscribers:
                    self._alert_subscribers.remove(callback)

        return unsubscribe

    def alerts(self) -> list[Alert]:
        """Active alerts."""
        with self._lock:
            return self.engine.active()

    def status(self) -> dict[str, Any]:
        """{"state": ..., "reason": ...} for surfaces that show why there is nothing to see."""
        return {"state": self.state.value, "reason": self.reason}


def _process_memory(p: Any) -> int | None:
    used = getattr(p, "usedGpuMemory", None)
    # NVML reports "not available" (no permission, MIG) as a huge sentinel or None.
    return None if used is None or used >= 2**63 else int(used)


def _summary(bucket: list[GpuSample]) -> GpuSample:
    """One coarse sample for a run of fine ones: means, but the worst temperature and memory."""
    last = bucket[-1]

    def mean(name: str) -> float | None:
        vals = [getattr(s, name) for s in bucket if getattr(s, name) is not None]
        return sum(vals) / len(vals) if vals else None

    def peak(name: str) -> Any:
        vals = [getattr(s, name) for s in bucket if getattr(s, name) is not None]
        return max(vals) if vals else None

    return GpuSample(
        last.index, last.uuid, last.name, bucket[0].time,
        utilization=mean("utilization"), memory_used=peak("memory_used"),
        memory_total=last.memory_total, temperature=peak("temperature"), power=mean("power"),
        power_limit=last.power_limit, sm_clock=last.sm_clock, processes=last.processes,
        ecc_errors=last.ecc_errors, xid=peak("xid"),
        error=next((s.error for s in reversed(bucket) if s.error), None),
    )  # fmt: skip


def _call(callback: Callable[..., Any], arg: Any) -> None:
    try:
        callback(arg)
    except Exception:  # one broken viewer must not stop the others
        log.exception("GPU monitor subscriber %r failed", callback)


_host: HostSampler | None = None
_host_pid: int | None = None
_host_lock = threading.Lock()


SOURCE_ENV = "WORKBENCH_GPU_SOURCE"


def make_host_sampler() -> HostSampler:
    """NVML by default; ``WORKBENCH_GPU_SOURCE=dcgm:http://HOST:9400/metrics`` reads a
    DCGM exporter (or any Prometheus endpoint with its metric names) instead."""
    source = os.environ.get(SOURCE_ENV, "").strip()
    if not source or source == "nvml":
        return HostSampler()
    kind, _, url = source.partition(":")
    if kind in ("dcgm", "prometheus") and url:
        from .dcgm import DcgmExporterSampler

        return DcgmExporterSampler(url)
    sampler = HostSampler()
    sampler._opened = True
    sampler._off(
        MonitorState.ERROR,
        f"{SOURCE_ENV}={source!r} is not understood; use nvml or dcgm:http://HOST:9400/metrics",
    )
    return sampler


def get_host_sampler() -> HostSampler:
    """The process-wide sampler, started on first use (a forked child gets its own)."""
    global _host, _host_pid
    with _host_lock:
        if _host is None or _host_pid != os.getpid():
            _host, _host_pid = make_host_sampler(), os.getpid()
            _host.start()
        return _host


def reset_host_sampler() -> None:
    """Stop and forget the process-wide sampler (tests; a changed configuration)."""
    global _host
    with _host_lock:
        if _host is not None:
            _host.stop()
        _host = None
