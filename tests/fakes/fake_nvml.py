"""A stateful fake of the pynvml API surface workbench calls, driven by a scripted scenario.

It raises the real ``pynvml.NVMLError`` subclasses (NotSupported, GpuIsLost, Timeout, ...),
so the code under test handles exactly what the real library throws. Constants and error
classes come from the real nvidia-ml-py; anything else the sampler calls that is not
faked here fails loudly with AttributeError.

A scenario (a dict, or JSON for subprocesses) looks like::

    {"init_error": null,            # or "LibraryNotFound" / "DriverNotLoaded" / "NoPermission"
     "step_seconds": 1.0,           # how long each scripted step lasts
     "gpus": [{"name": "NVIDIA H100 80GB HBM3", "memory_total": 85899345920,
               "power_limit": 700,                       # W
               "steps": [{"utilization": 90, "memory_used": 1e9, "temperature": 60,
                          "power": 300, "sm_clock": 1980, "ecc": 0}, ...],  # last one holds
               "not_supported": ["power", "ecc"],        # fields that raise NotSupported
               "lost_at": 5.0,                           # seconds in: every call -> GpuIsLost
               "xid": [{"at": 2.0, "code": 79}],         # XID events
               "processes": [{"pid": 1, "memory": 1e9}]  # or "cuda_visible": every live process
                                                         # whose CUDA_VISIBLE_DEVICES names it
              }]}

Time is ``clock() - start``; in-process tests pass a manual clock, subprocesses use the
wall clock from when the fake was built.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from types import ModuleType, SimpleNamespace
from typing import Any

_FAKE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "nvml_pkg")


def real_pynvml() -> ModuleType:
    """The real nvidia-ml-py module, even when the fake shadows the name ``pynvml``."""
    mod = sys.modules.get("pynvml")
    if mod is not None and not getattr(mod, "WORKBENCH_FAKE", False):
        return mod
    if "_real_pynvml" in sys.modules:
        return sys.modules["_real_pynvml"]
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        path = os.path.join(folder, "pynvml.py")
        if folder != _FAKE_DIR and os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("_real_pynvml", path)
            assert spec and spec.loader
            real = importlib.util.module_from_spec(spec)
            sys.modules["_real_pynvml"] = real
            spec.loader.exec_module(real)
            return real
    raise ImportError("nvidia-ml-py (pynvml.py) is not on sys.path")


_real = real_pynvml()


def nvml_error(name: str) -> Exception:
    """The real pynvml error for ``name`` ("NotSupported" -> NVMLError_NotSupported)."""
    cls = getattr(_real, f"NVMLError_{name}")
    code = next(v for v, c in _real.NVMLError._valClassMapping.items() if c is cls)
    return _real.NVMLError(code)


class ManualClock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        self.now += seconds


class FakeHandle:
    """What nvmlDeviceGetHandleByIndex returns."""

    def __init__(self, index: int) -> None:
        self.index = index


class FakeEventSet:
    """An NVML event set: which GPUs are registered and which XIDs were delivered."""

    def __init__(self) -> None:
        self.gpus: set[int] = set()
        self.delivered: set[tuple[int, int]] = set()


class FakeNvml:
    """Stands in for the pynvml module (put it at workbench.monitor._nvml.pynvml)."""

    WORKBENCH_FAKE = True

    def __init__(self, scenario: dict[str, Any], clock: Callable[[], float] = time.time) -> None:
        self.scenario = scenario
        self.gpus: list[dict[str, Any]] = [dict(g) for g in scenario.get("gpus", [])]
        for i, g in enumerate(self.gpus):
            g.setdefault("name", "NVIDIA Fake GPU")
            g.setdefault("uuid", f"GPU-fake-{i:04d}-0000-0000-000000000000")
            g.setdefault("memory_total", 80 * 2**30)
            g.setdefault("power_limit", 700)
            g.setdefault("steps", [{}])
        self.step_seconds = float(scenario.get("step_seconds", 1.0))
        self.clock = clock
        self.start = clock()
        self.initialised = 0
        self.calls: Counter[str] = Counter()

    # ---- scenario state -----------------------------------------------------------------
    def elapsed(self) -> float:
        """Seconds since the scenario started."""
        return self.clock() - self.start

    def _gpu(self, handle: FakeHandle, call: str, field: str | None = None) -> dict[str, Any]:
        self.calls[call] += 1
        if not self.initialised:
            raise nvml_error("Uninitialized")
        g = self.gpus[handle.index]
        lost_at = g.get("lost_at")
        if lost_at is not None and self.elapsed() >= lost_at:
            raise nvml_error("GpuIsLost")
        if field is not None and field in g.get("not_supported", ()):
            raise nvml_error("NotSupported")
        return g

    def _step(self, g: dict[str, Any]) -> dict[str, Any]:
        steps = g["steps"]
        i = min(int(self.elapsed() / self.step_seconds), len(steps) - 1)
        return {"utilization": 0, "memory_used": 0, "temperature": 40, "power": 60,
                "sm_clock": 1410, "ecc": 0, **steps[max(i, 0)]}  # fmt: skip

    # ---- the pynvml surface ---------------------------------------------------------------
    def nvmlInit(self) -> None:
        """Fails as the scenario says, else counts an initialisation."""
        self.calls["nvmlInit"] += 1
        if self.scenario.get("init_error"):
            raise nvml_error(self.scenario["init_error"])
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        """Undo one nvmlInit."""
        self.calls["nvmlShutdown"] += 1
        if not self.initialised:
            raise nvml_error("Uninitialized")
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        """How many GPUs the scenario has."""
        self.calls["nvmlDeviceGetCount"] += 1
        if not self.initialised:
            raise nvml_error("Uninitialized")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        """A handle; InvalidArgument past the end, GpuIsLost once the GPU vanished."""
        if not 0 <= index < len(self.gpus):
            self.calls["nvmlDeviceGetHandleByIndex"] += 1
            raise nvml_error("InvalidArgument")
        handle = FakeHandle(index)
        self._gpu(handle, "nvmlDeviceGetHandleByIndex")
        return handle

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        """Board name (nvidia-ml-py 12+ returns str)."""
        return str(self._gpu(handle, "nvmlDeviceGetName")["name"])

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        """Board UUID."""
        return str(self._gpu(handle, "nvmlDeviceGetUUID")["uuid"])

    def nvmlDeviceGetMemoryInfo(self, handle: FakeHandle) -> SimpleNamespace:
        """Framebuffer memory in bytes."""
        g = self._gpu(handle, "nvmlDeviceGetMemoryInfo", "memory")
        used = int(self._step(g)["memory_used"])
        return SimpleNamespace(
            total=int(g["memory_total"]), used=used, free=int(g["memory_total"]) - used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        """Busy percentages."""
        g = self._gpu(handle, "nvmlDeviceGetUtilizationRates", "utilization")
        return SimpleNamespace(gpu=int(self._step(g)["utilization"]), memory=0)

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        """Core temperature in C."""
        assert sensor == _real.NVML_TEMPERATURE_GPU
        g = self._gpu(handle, "nvmlDeviceGetTemperature", "temperature")
        return int(self._step(g)["temperature"])

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        """Power draw in mW."""
        g = self._gpu(handle, "nvmlDeviceGetPowerUsage", "power")
        return int(float(self._step(g)["power"]) * 1000)

    def nvmlDeviceGetEnforcedPowerManagementLimit(self, handle: FakeHandle) -> int:
        """Power limit in mW."""
        g = self._gpu(handle, "nvmlDeviceGetEnforcedPowerManagementLimit", "power_limit")
        return int(float(g["power_limit"]) * 1000)

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        """SM clock in MHz."""
        assert clock_type == _real.NVML_CLOCK_SM
        g = self._gpu(handle, "nvmlDeviceGetClockInfo", "sm_clock")
        return int(self._step(g)["sm_clock"])

    def nvmlDeviceGetTotalEccErrors(self, handle: FakeHandle, error_type: int, counter: int) -> int:
        """Volatile uncorrected ECC error count."""
        assert error_type == _real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        assert counter == _real.NVML_VOLATILE_ECC
        g = self._gpu(handle, "nvmlDeviceGetTotalEccErrors", "ecc")
        return int(self._step(g)["ecc"])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[SimpleNamespace]:
        """Compute processes on the GPU, scripted or found by their CUDA_VISIBLE_DEVICES."""
        g = self._gpu(handle, "nvmlDeviceGetComputeRunningProcesses", "processes")
        spec = g.get("processes", [])
        if spec == "cuda_visible":
            return [
                SimpleNamespace(pid=pid, usedGpuMemory=2**30) for pid in _cuda_visible(handle.index)
            ]
        return [SimpleNamespace(pid=int(p["pid"]), usedGpuMemory=p.get("memory")) for p in spec]

    def nvmlEventSetCreate(self) -> FakeEventSet:
        """An empty event set."""
        self.calls["nvmlEventSetCreate"] += 1
        return FakeEventSet()

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, types: int, es: FakeEventSet) -> None:
        """Register a GPU's XID events (NotSupported when the scenario says "xid")."""
        self._gpu(handle, "nvmlDeviceRegisterEvents", "xid")
        if types & _real.nvmlEventTypeXidCriticalError:
            es.gpus.add(handle.index)

    def nvmlEventSetWait_v2(self, es: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        """The next undelivered XID that is due, else NVMLError_Timeout (never blocks)."""
        self.calls["nvmlEventSetWait_v2"] += 1
        now = self.elapsed()
        for i in sorted(es.gpus):
            for n, x in enumerate(self.gpus[i].get("xid", [])):
                if x["at"] <= now and (i, n) not in es.delivered:
                    es.delivered.add((i, n))
                    return SimpleNamespace(device=FakeHandle(i), eventType=_real.nvmlEventTypeXidCriticalError,
                                           eventData=int(x["code"]), gpuInstanceId=0, computeInstanceId=0)  # fmt: skip
        raise nvml_error("Timeout")

    def nvmlEventSetFree(self, es: FakeEventSet) -> None:
        """Release an event set."""
        self.calls["nvmlEventSetFree"] += 1

    def __getattr__(self, name: str) -> Any:
        # Constants and error classes are the real library's; unfaked calls fail loudly.
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType")):
            return getattr(_real, name)
        raise AttributeError(f"the fake NVML does not implement {name}")


def _cuda_visible(index: int) -> list[int]:
    import psutil

    pids = []
    for p in psutil.process_iter(["pid"]):
        try:
            visible = p.environ().get("CUDA_VISIBLE_DEVICES", "")
        except (psutil.Error, OSError):
            continue
        if str(index) in [v.strip() for v in visible.split(",") if v.strip()]:
            pids.append(p.pid)
    return pids
