"""`workbench queue` and the local GPU queue it describes: waiting jobs are listed and
served in one order (priority, then age), with why each waits, beside a cluster's Pending
jobs. Real supervisors on a fake 1-GPU host (the fake NVML, as tests/monitor does)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import wait_for
from tests.monitor.conftest import clock, fake_gpus_in_subprocesses, install_fake  # noqa: F401
from workbench.backends.gpu_queue import decide
from workbench.cli import main
from workbench.manager import JobManager
from workbench.spec import JobEvent, JobRecord, JobStatus, TrainSpec

ONE_GPU = {"gpus": [{"name": "NVIDIA A10", "steps": [{"utilization": 0}]}], "step_seconds": 1.0}


def _job(name: str, code: str, priority: str | None = None) -> TrainSpec:
    return TrainSpec(command=[sys.executable, "-c", code], name=name, gpus=1, priority=priority)


@pytest.mark.slow
def test_waiting_jobs_are_listed_and_served_by_priority_then_age(
    manager: JobManager,
    install_fake,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    fake_gpus_in_subprocesses(monkeypatch, tmp_path, ONE_GPU)
    install_fake(ONE_GPU, use_clock=False)
    release = tmp_path / "release"
    hold = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.05)"
    manager.submit(_job("holder", hold))
    wait_for(lambda: manager.get("holder").status is JobStatus.RUNNING, 60, "holder running")
    # submitted oldest first; "urgent" is the youngest but has the highest priority
    for name, priority in (("first", None), ("second", "0"), ("urgent", "10")):
        manager.submit(_job(name, "import time; time.sleep(0.3)", priority))
        wait_for(lambda n=name: "waiting for GPUs" in manager.get(n).message, 60, f"{name} queued")
    # a cluster job the scheduler cannot place, with a higher priority class value
    manager.store.insert(
        JobRecord(
            name="gang",
            status=JobStatus.PENDING,
            backend="kubernetes",
            spec={"command": ["python", "t.py"], "workers": 4, "gpus": 8, "priority": "high"},
            image="pytorch",
            message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
            details={"queue": "research", "priority_class": "high", "priority_value": 1000},
            events=[JobEvent(time.time(), "Unschedulable", "0/3 nodes are available")],
        )
    )
    assert main(["queue", "-o", "json"]) == 0
    queue = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in queue] == ["gang", "urgent", "first", "second"]
    assert [e["priority_value"] for e in queue] == [1000, 10, 0, 0]
    gang, urgent, first, _ = queue
    assert (gang["backend"], gang["queue"], gang["reason"]) == (
        "kubernetes",
        "research",
        "Unschedulable",
    )
    assert "Insufficient nvidia.com/gpu" in gang["message"]
    assert urgent["reason"] == first["reason"] == "Queued"
    assert first["message"] == "waiting for GPUs: needs 1 x 1, 0 of 1 free"
    assert main(["queue"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:4] == ["#", "NAME", "BACKEND/QUEUE", "PRIORITY"]
    assert table[1].split()[:4] == ["1", "gang", "kubernetes/research", "high"]
    manager.store.update("gang", status=JobStatus.CANCELLED)  # no cluster to cancel it on
    # the GPU goes to the waiting jobs in the order the queue shows, one after another
    release.touch()
    done = [manager.wait(n, timeout=90) for n in ("holder", "urgent", "first", "second")]
    assert all(r.status is JobStatus.SUCCEEDED for r in done), [r.message for r in done]
    starts = [r.started_at or 0 for r in done]
    assert starts == sorted(starts), [(r.name, r.started_at) for r in done]


def _row(name: str, created: float, gpus: float, workers: int = 1, priority: str | None = None,
         alloc: list[list[int]] | None = None) -> dict[str, object]:  # fmt: skip
    spec = {"gpus": gpus, "workers": workers, "priority": priority}
    details = {"gpu_alloc": alloc} if alloc else {}
    status = "Running" if alloc else "Pending"
    return {"name": name, "created_at": created, "status": status,
            "spec_json": json.dumps(spec), "details": details}  # fmt: skip


def test_the_decision_is_first_fit_in_queue_order() -> None:
    rows = [
        _row("running", 0, 1, alloc=[[0]]),
        _row("big", 1, 2, workers=2),  # ahead, but 4 GPUs are not free: it waits
        _row("half-a", 2, 0.5),
        _row("late-urgent", 9, 1, priority="5"),
        _row("half-b", 3, 0.5),
        _row("whole", 4, 1),
    ]
    # 3 free GPUs (1..3): the urgent job first, then the two halves share one, then whole
    assert decide(rows, [0, 1, 2, 3]) == {
        "late-urgent": [[1]],
        "half-a": [[2]],
        "half-b": [[2]],
        "whole": [[3]],
    }
    assert decide(rows, [0]) == {}
