"""GPU sampler cost at 1 Hz with 8 fake GPUs, and memory after 24 h of simulated samples.

    .venv/bin/python bench/bench_sampler.py [--gpus 8] [--seconds 30] [--hours 30]

Compared in the same run with what a user would do instead: a gpustat-style query (init,
read every field of every GPU including the process list, shut down; once per refresh)
and Dask's NVML diagnostics (distributed.diagnostics.nvml.real_time for each GPU), all
against the same fake NVML. The fake answers in microseconds; see docs/benchmarks.md for
what real NVML calls add.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.fake_nvml import FakeNvml, ManualClock  # noqa: E402
from workbench.monitor import _nvml  # noqa: E402
from workbench.monitor.sampler import HostSampler  # noqa: E402


def scenario(gpus: int) -> dict[str, Any]:
    """8 busy GPUs with a few processes each and a wobbling load."""
    steps = [{"utilization": 50 + (i % 40), "temperature": 60 + (i % 10), "memory_used": (20 + i % 5) * 2**30,
              "power": 300 + i % 50, "sm_clock": 1980} for i in range(60)]  # fmt: skip
    procs = [{"pid": 1000 + k, "memory": 2**30} for k in range(4)]
    return {
        "gpus": [{"steps": steps, "processes": procs} for _ in range(gpus)],
        "step_seconds": 1.0,
    }


def install(fake: Any) -> None:
    _nvml.pynvml = fake
    _nvml.reset()


def per_call_us(fn: Any, n: int) -> float:
    """Mean CPU microseconds of one call."""
    fn()
    start = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - start) / n * 1e6


def gpustat_style(nv: Any) -> Any:
    """What a polling script or gpustat does per refresh: every field, every GPU, every time."""

    def query() -> list[dict[str, Any]]:
        nv.nvmlInit()
        try:
            out = []
            for i in range(nv.nvmlDeviceGetCount()):
                h = nv.nvmlDeviceGetHandleByIndex(i)
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                out.append({
                    "name": nv.nvmlDeviceGetName(h), "uuid": nv.nvmlDeviceGetUUID(h),
                    "mem": (mem.used, mem.total), "util": nv.nvmlDeviceGetUtilizationRates(h).gpu,
                    "temp": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                    "power": nv.nvmlDeviceGetPowerUsage(h),
                    "limit": nv.nvmlDeviceGetEnforcedPowerManagementLimit(h),
                    "clock": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                    "procs": [(p.pid, p.usedGpuMemory) for p in nv.nvmlDeviceGetComputeRunningProcesses(h)],
                })  # fmt: skip
            return out
        finally:
            nv.nvmlShutdown()

    return query


def dask_style(fake: Any, gpus: int) -> Any:
    """Dask's NVML diagnostics (real_time: utilisation + memory) for each GPU in turn."""
    from distributed.diagnostics import nvml as dnvml

    dnvml.pynvml = fake
    dnvml.NVML_STATE = dnvml.NVMLState.INITIALIZED
    dnvml.NVML_OWNER_PID = os.getpid()
    fake.nvmlInit()

    def query() -> list[dict[str, Any]]:
        out = []
        for i in range(gpus):
            os.environ["CUDA_VISIBLE_DEVICES"] = str(i)  # how real_time picks its GPU
            out.append(dnvml.real_time())
        return out

    return query


def cpu_at_1hz(gpus: int, seconds: float) -> float:
    """Percent of one core the running sampler thread uses at 1 Hz, measured on the clock."""
    install(FakeNvml(scenario(gpus)))
    sampler = HostSampler(interval=1.0, slow_interval=10.0)
    me = psutil.Process()
    # Let the main thread only sleep, so the process's CPU is the sampler's.
    sampler.start()
    time.sleep(1.0)
    c0, w0 = sum(me.cpu_times()[:2]), time.monotonic()
    threading.Event().wait(seconds)
    c1, w1 = sum(me.cpu_times()[:2]), time.monotonic()
    sampler.stop()
    return (c1 - c0) / (w1 - w0) * 100


def memory_24h(gpus: int, hours: float) -> list[tuple[float, float, int]]:
    """(simulated hours, RSS MiB, samples retained) at checkpoints of a simulated run."""
    clock = ManualClock()
    install(FakeNvml(scenario(gpus), clock=clock))
    sampler = HostSampler(interval=1.0, slow_interval=10.0, history_seconds=3600, clock=clock)
    me = psutil.Process()
    marks = {int(h * 3600) for h in (1, 2, 6, 12, 24, hours) if h <= hours}
    out = []
    gc.collect()
    for second in range(1, int(hours * 3600) + 1):
        sampler.sample()
        clock.advance(1.0)
        if second in marks:
            gc.collect()
            retained = sum(len(sampler.history(i)) for i in range(gpus))
            out.append((second / 3600, me.memory_info().rss / 2**20, retained))
    return out


def main() -> int:
    """Run and print the figures (markdown-ready)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0, help="wall seconds of the live 1 Hz run")
    ap.add_argument("--hours", type=float, default=30.0, help="simulated hours for the memory run")
    ns = ap.parse_args()

    clock = ManualClock()
    install(FakeNvml(scenario(ns.gpus), clock=clock))
    sampler = HostSampler(interval=1.0, slow_interval=10.0, clock=clock)
    sampler.open()

    def one_second() -> None:
        # One simulated second: one fast tick, and the slow tick (process lists) every 10th.
        sampler.sample()
        clock.advance(1.0)

    ours = per_call_us(one_second, 2000)
    gpustat = per_call_us(gpustat_style(FakeNvml(scenario(ns.gpus))), 2000)
    dask = per_call_us(dask_style(FakeNvml(scenario(ns.gpus)), ns.gpus), 2000)
    print(f"## per refresh of {ns.gpus} fake GPUs (CPU microseconds; = % of a core x 1e4 at 1 Hz)")
    print(f"workbench HostSampler.sample(): {ours:8.1f} us  (all fields, history, alerts)")
    print(
        f"gpustat-style full query:       {gpustat:8.1f} us  ratio ours/gpustat = {ours / gpustat:.2f}"
    )
    print(f"dask real_time() per GPU:       {dask:8.1f} us  ratio ours/dask = {ours / dask:.2f}")
    print(f"=> sampler CPU at 1 Hz (from per-tick cost): {ours / 1e4:.3f} % of one core")
    live = cpu_at_1hz(ns.gpus, ns.seconds)
    print(
        f"=> sampler CPU at 1 Hz, live thread, {ns.seconds:g} s on the clock: {live:.3f} % of one core"
    )
    print(
        f"## memory, {ns.hours:g} simulated hours at 1 Hz, {ns.gpus} GPUs (1 h fine + 24 h per-minute)"
    )
    t0 = time.perf_counter()
    for hours, rss, retained in memory_24h(ns.gpus, ns.hours):
        print(f"after {hours:5.1f} h: RSS {rss:7.1f} MiB, samples kept {retained}")
    print(f"(simulated in {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
