"""The Python API: submit/get/jobs and the Job handle, errors included."""

from __future__ import annotations

from pathlib import Path

import pytest

import workbench
from workbench.errors import JobNotFoundError, SpecError

SCRIPTS = Path(__file__).resolve().parent / "scripts"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"workers": -1}, "workers"),
        ({"image": "nope"}, "image"),
        ({"env": {"A-B": "1"}}, "env.A-B"),
        ({"data": ["bad"]}, "data"),
        ({"name": "UPPER"}, "name"),
        ({"instance_spec": "x"}, "spec"),
        ({"gpus": 3, "instance_spec": "gpu.1x"}, "gpus"),
    ],
)
def test_submit_validation_errors(wb_home, fields, field):
    with pytest.raises(SpecError) as e:
        workbench.submit("python train.py", **fields)
    assert e.value.field == field


def test_job_handle_round_trip(wb_home):
    job = workbench.submit(
        "python fail_rank.py",
        name="api",
        workers=2,
        working_dir=str(SCRIPTS),
        env={"FAIL_RANK": "9"},
    )
    assert job.name == "api"
    assert list(job.logs(rank=1, follow=True))[-1] == "rank 1 finished"
    record = job.wait(timeout=60)
    assert record.status is workbench.JobStatus.SUCCEEDED
    assert workbench.get("api") == job
    assert [j.name for j in workbench.jobs()] == ["api"]
    assert workbench.jobs(status="Running") == []
    assert "Job api: Succeeded" in repr(job)
    again = job.rerun()
    assert again.wait(timeout=60).status is workbench.JobStatus.SUCCEEDED
    with pytest.raises(JobNotFoundError):
        workbench.get("missing")


def test_submit_from_yaml_file(wb_home, tmp_path):
    f = tmp_path / "job.yaml"
    f.write_text(f"command: [python, fail_rank.py]\nworkdir: {SCRIPTS}\nenv: {{FAIL_RANK: '5'}}\n")
    job = workbench.submit(file=f, name="yaml-job", wait=True)
    assert job.record.status is workbench.JobStatus.SUCCEEDED


def test_cancel_from_the_api(wb_home):
    job = workbench.submit(["python", "sleeper.py"], working_dir=str(SCRIPTS))
    assert job.cancel().status is workbench.JobStatus.CANCELLED
