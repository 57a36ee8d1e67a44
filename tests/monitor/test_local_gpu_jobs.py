"""Local jobs on a fake 2-GPU host: placement, queueing, per-job GPU metrics and alert events.

The supervisor is a real detached process; it imports the fake NVML as ``pynvml`` from
tests/fakes/nvml_pkg (first on PYTHONPATH), the test process has the same fake at the seam.
"""

from __future__ import annotations

import sys

import pytest

from tests.conftest import wait_for
from tests.monitor.conftest import fake_gpus_in_subprocesses
from workbench.errors import SubmitError
from workbench.monitor import job_metrics
from workbench.spec import JobStatus, TrainSpec

HOT_HOST = {
    "gpus": [
        {"name": "NVIDIA H100 80GB HBM3", "processes": "cuda_visible",
         "steps": [{"utilization": 95, "temperature": 70, "memory_used": 30 * 2**30},
                   {"utilization": 97, "temperature": 91, "memory_used": 31 * 2**30}]},
        {"name": "NVIDIA H100 80GB HBM3", "processes": "cuda_visible",
         "steps": [{"utilization": 40, "temperature": 60}]},
    ],
    "step_seconds": 0.3,
}  # fmt: skip


@pytest.fixture
def gpu_host(install_fake, monkeypatch, tmp_path):
    """A private WORKBENCH_HOME on a fake 2-GPU host, here and in every supervisor."""
    fake_gpus_in_subprocesses(monkeypatch, tmp_path, HOT_HOST)
    monkeypatch.setenv("WORKBENCH_GPU_SLOW_INTERVAL", "0.3")
    return install_fake(HOT_HOST, use_clock=False)


def submit(manager, seconds: float, gpus: float = 1, workers: int = 1, name: str | None = None):
    code = (
        "import os, time; print('visible', os.environ['CUDA_VISIBLE_DEVICES'], flush=True); "
        f"time.sleep({seconds})"
    )
    spec = TrainSpec(command=[sys.executable, "-c", code], gpus=gpus, workers=workers, name=name)
    return manager.submit(spec)


@pytest.mark.slow
def test_a_gpu_job_gets_its_gpu_and_its_metrics_file_fills(manager, gpu_host):
    record = submit(manager, 2.0, name="hot")
    done = manager.wait(record.name, timeout=60)
    assert done.status is JobStatus.SUCCEEDED, done.message
    [line] = [ln for ln in manager.logs("hot") if ln.startswith("visible")]
    assert line == "visible 0"
    samples = job_metrics(done.job_dir or "")
    assert len(samples) >= 5
    assert {s["index"] for s in samples} == {0} and {s["rank"] for s in samples} == {0}
    assert samples[0]["name"] == "NVIDIA H100 80GB HBM3" and samples[0]["utilization"] in (
        95.0,
        97.0,
    )
    # the rank's process on the GPU is tied to rank 0
    owned = [p for s in samples for p in (s["processes"] or [])]
    assert owned and {p["rank"] for p in owned} == {0}
    assert manager.metrics("hot")["gpu"] == samples  # the manager reads the same file
    reasons = [e.reason for e in done.events]
    assert reasons.count("GpuAlert:temperature") == 1, reasons
    [alert] = [e for e in done.events if e.reason == "GpuAlert:temperature"]
    assert alert.level == "warning" and "GPU 0 is at 91 C" in alert.message
    assert reasons.index("GpuAlert:temperature") < reasons.index("Succeeded")


@pytest.mark.slow
def test_too_many_gpus_is_refused_and_a_full_host_queues(manager, gpu_host):
    with pytest.raises(SubmitError) as e:
        submit(manager, 1, gpus=2, workers=2)
    assert "needs 2 GPU(s) x 2 worker(s) but this host has 2 GPU(s)" in str(e.value)
    first = submit(manager, 2.0, gpus=2, name="big")
    wait_for(lambda: manager.get("big").status is JobStatus.RUNNING, what="big running")
    second = submit(manager, 0.2, gpus=1, name="small")
    wait_for(lambda: "waiting for GPUs" in manager.get("small").message, what="small queued")
    assert manager.get("small").status is JobStatus.PENDING
    assert manager.wait(first.name, timeout=60).status is JobStatus.SUCCEEDED
    done = manager.wait(second.name, timeout=60)
    assert done.status is JobStatus.SUCCEEDED
    assert "Queued" in [e.reason for e in done.events]
    assert (
        done.started_at is not None
        and done.started_at >= (manager.get("big").finished_at or 0) - 0.5
    )
