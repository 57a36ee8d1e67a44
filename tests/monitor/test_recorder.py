"""The per-job GPU recorder reports through any JobJournal, not through a supervisor.

The fake NVML sits at the sampler's seam; the journal is an in-memory one.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_for
from tests.fakes.journal import ListJournal
from workbench.monitor.metrics import GPU_FILE, metrics_dir, read_jsonl
from workbench.monitor.recorder import start_job_recorder, stop_job_recorder


def test_the_recorder_writes_samples_and_alerts_through_the_journal(
    install_fake: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WORKBENCH_GPU_INTERVAL", "0.05")
    monkeypatch.setenv("WORKBENCH_GPU_RECORD_INTERVAL", "0")
    install_fake({"gpus": [{"steps": [{"temperature": 95}]}, {}]}, use_clock=False)
    journal = ListJournal(pids={os.getpid(): 1})
    recorder = start_job_recorder(journal, tmp_path, [[0], [1]])
    assert recorder is not None
    path = metrics_dir(tmp_path) / GPU_FILE
    wait_for(lambda: len(read_jsonl(path)) >= 2, what="two GPU samples in gpu.jsonl")
    wait_for(lambda: "GpuAlert:temperature" in journal.reasons(), what="the temperature alert")
    stop_job_recorder(recorder)
    stop_job_recorder(recorder)  # a second stop (disk-full path, then finish) is a no-op
    samples = read_jsonl(path)
    assert {s["index"]: s["rank"] for s in samples} == {0: 0, 1: 1}


def test_a_recorder_without_gpus_says_why_in_the_journal(install_fake: Any, tmp_path: Path) -> None:
    install_fake({"init_error": "DriverNotLoaded"})
    journal = ListJournal()
    assert start_job_recorder(journal, tmp_path, [[0]]) is None
    assert journal.reasons() == ["GpuMonitorOff"]
    assert "not loaded" in journal.events[0].message
    assert start_job_recorder(journal, tmp_path, [[], []]) is None  # a CPU job: no recorder
    assert journal.reasons() == ["GpuMonitorOff"]
