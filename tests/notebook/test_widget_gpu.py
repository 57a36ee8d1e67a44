"""GPU figures in the job widget, on a fake 2-GPU host (the fake NVML of tests/fakes).

The job's supervisor runs the monitor's recorder, which writes JOB_DIR/metrics/gpu.jsonl;
the widget shows the latest sample of each of the job's GPUs from that file.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from tests.fakes.fake_nvml import FakeNvml
from tests.monitor.conftest import fake_gpus_in_subprocesses
from workbench.api import Job
from workbench.manager import JobManager
from workbench.monitor import _nvml, job_metrics, sampler
from workbench.spec import TrainSpec
from workbench.widgets.job import JobWidget

HOST = {
    "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "processes": "cuda_visible",
         "steps": [{"utilization": 87, "temperature": 66, "memory_used": 30 * 2**30}]},
        {"name": "NVIDIA H100 80GB HBM3", "processes": "cuda_visible",
         "steps": [{"utilization": 12, "temperature": 41}]},
    ],
    "step_seconds": 0.3,
}  # fmt: skip


@pytest.fixture
def gpu_host(manager: JobManager, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The fake NVML here (at the monitor's seam) and in every supervisor (via PYTHONPATH)."""
    fake_gpus_in_subprocesses(monkeypatch, tmp_path, HOST)
    monkeypatch.setattr(_nvml, "pynvml", FakeNvml(HOST, clock=time.time))
    _nvml.reset()
    sampler.reset_host_sampler()
    yield manager
    sampler.reset_host_sampler()
    _nvml.reset()


def test_widget_shows_the_jobs_gpu_samples(gpu_host: JobManager) -> None:
    code = "import time; time.sleep(30)"
    spec = TrainSpec(command=[sys.executable, "-c", code], gpus=1, workers=1, name="wid-gpu")
    job = Job("wid-gpu", gpu_host, gpu_host.submit(spec))
    wdg = JobWidget(job, interval=0.2)
    try:
        deadline = time.time() + 30
        while time.time() < deadline and "% util" not in str(wdg.status.get_state()["value"]):
            time.sleep(0.1)
        html = str(wdg.status.get_state()["value"])
        samples = job_metrics(gpu_host.get("wid-gpu").job_dir or "")
        assert samples, "the recorder wrote no sample"
        last = samples[-1]
        figures = re.search(r"GPUs: (.*?)</div>", html)
        assert figures, html
        assert f"GPU {last['index']}: {last['utilization']:.0f}% util" in figures.group(1)
        assert f"{last['temperature']:.0f}°C" in figures.group(1)
    finally:
        job.cancel()
        wdg.close()
    assert not wdg.polling
