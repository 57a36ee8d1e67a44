"""The no-GPU path against the REAL nvidia-ml-py: every surface says plainly why, nothing crashes.

These tests are about a host without an NVIDIA driver (like the CI machine); on a host
that has one they are skipped, and tests/monitor/test_gpu_real.py runs instead.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from workbench.errors import MonitorUnavailableError, SubmitError
from workbench.monitor import MonitorState, get_host_sampler, gpu_inventory, live_figures
from workbench.monitor.stream import split_metric_lines
from workbench.spec import TrainSpec

PLAIN = "no NVIDIA driver on this host"


@pytest.fixture(autouse=True)
def no_driver(real_nvml):
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return
    pynvml.nvmlShutdown()
    pytest.skip("this host has an NVIDIA driver: the no-GPU path cannot be seen here")


def test_the_sampler_says_why(no_driver):
    sampler = get_host_sampler()
    assert sampler.state is MonitorState.NO_LIBRARY
    assert sampler.reason.startswith(PLAIN)
    assert sampler.latest() == [] and sampler.alerts() == [] and sampler.history(0) == []
    assert live_figures() == {}


def test_the_inventory_says_why(no_driver):
    with pytest.raises(MonitorUnavailableError) as e:
        gpu_inventory()
    assert e.value.reason.startswith(PLAIN)


def test_workbench_top_says_why(wb_home):
    p = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "top"], capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 0, p.stderr
    assert f"GPUs: none - {PLAIN}" in p.stdout
    assert "Traceback" not in p.stderr


def test_a_gpu_job_is_refused_with_the_reason(manager):
    with pytest.raises(SubmitError) as e:
        manager.submit(TrainSpec(command=[sys.executable, "-c", "pass"], gpus=1))
    assert PLAIN in str(e.value) and "--gpus 0" in str(e.value)


def test_the_agent_runs_the_job_and_reports_why(no_driver):
    p = subprocess.run(
        [sys.executable, "-m", "workbench.monitor.agent", "--", sys.executable, "-c", "print('trained')"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert p.returncode == 0
    user, records = split_metric_lines(p.stdout.split("\n")[:-1])
    assert user == ["trained"]
    assert records == [{**records[0], "kind": "monitor", "state": "no_library"}]
    assert records[0]["reason"].startswith(PLAIN)


def test_the_gpu_monitor_widget_says_why(no_driver):
    from workbench.widgets import show_gpus

    w = show_gpus()
    assert PLAIN in w.header.value and w.cards == {}
    w.close()
