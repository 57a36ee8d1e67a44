"""Real NVML on a real GPU host. Skipped (honestly) where there is no NVIDIA GPU and driver."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from workbench.monitor import MonitorState, gpu_inventory
from workbench.monitor.sampler import HostSampler
from workbench.monitor.stream import split_metric_lines

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def need_gpu(real_nvml):
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        pytest.skip(f"needs an NVIDIA GPU and driver; here: {e}")
    count = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()
    if count == 0:
        pytest.skip("the NVIDIA driver reports no GPUs")


def test_the_sampler_reads_every_gpu_with_sane_values():
    sampler = HostSampler(interval=0.2, slow_interval=0.5)
    sampler.start()
    try:
        time.sleep(1.0)
        samples = sampler.latest()
    finally:
        sampler.stop()
    assert sampler.state is MonitorState.OK
    inventory = gpu_inventory()
    assert [s.index for s in samples] == [g.index for g in inventory]
    for s, g in zip(samples, inventory, strict=True):
        assert s.uuid == g.uuid and s.uuid.startswith(("GPU-", "MIG-")) and s.name
        assert s.error is None and s.memory_total == g.memory_total > 0
        assert s.memory_used is None or 0 <= s.memory_used <= s.memory_total
        assert s.utilization is None or 0 <= s.utilization <= 100
        assert s.temperature is None or 5 <= s.temperature <= 120
        assert s.power is None or 0 < s.power < 2000
        assert s.processes is None or all(p["pid"] > 0 for p in s.processes)
    assert len(sampler.history(samples[0].index)) >= 3


def test_a_sample_of_every_gpu_is_cheap():
    sampler = HostSampler(slow_interval=3600)
    assert sampler.open()
    sampler.sample()  # the slow tick (process lists) once
    start = time.process_time()
    for _ in range(50):
        sampler.sample()
    per_tick = (time.process_time() - start) / 50
    assert per_tick < 0.005, f"{per_tick * 1e3:.2f} ms of CPU per fast tick"


def test_the_agent_reports_the_visible_gpu():
    p = subprocess.run(
        [sys.executable, "-m", "workbench.monitor.agent", "--interval", "0.2", "--emit-interval", "0.2", "--",
         sys.executable, "-c", "import time; time.sleep(1); print('done')"],
        capture_output=True, text=True, timeout=60, env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": "0"},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    user, records = split_metric_lines(p.stdout.split("\n")[:-1])
    assert user == ["done"]
    gpu = [r for r in records if r["kind"] == "gpu"]
    assert gpu and all([s["index"] for s in r["samples"]] == [0] for r in gpu)
