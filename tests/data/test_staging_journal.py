"""Staging and the output upload report through any JobJournal, not through a supervisor.

A backend hands them a journal (the local one writes its JobStore); here an in-memory one
stands in, with real files and a real upload to a local output URL.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.fakes.journal import ListJournal
from workbench.data.staging import JobData, stage_job, upload_job_outputs
from workbench.spec import JobStatus, Mount, TrainSpec


def test_staging_and_upload_report_to_the_journal(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.csv").write_text("a,b\n")
    bucket = tmp_path / "bucket"  # a local output URL: upload_tree copies into it
    bucket.mkdir()
    work, home = tmp_path / "work", tmp_path / "home"
    job_dir = home / "jobs" / "j1"
    for d in (work, job_dir):
        d.mkdir(parents=True)
    spec = TrainSpec(command=["python", "train.py"], working_dir=str(work),
                     data=[Mount(str(src), "/data")], outputs=[Mount(str(bucket), "out")])  # fmt: skip
    data = JobData(spec, job_dir, home)
    journal = ListJournal()
    env = stage_job(data, journal, check=lambda: None)
    assert json.loads(env["WORKBENCH_MOUNTS"]) == {"/data": str(src)}
    assert journal.reasons() == ["Staging", "Staged"] and journal.messages[-1] == ""
    (work / "out" / "model.pt").write_text("weights")
    ends = upload_job_outputs(data, journal, JobStatus.SUCCEEDED, "", "Succeeded", "info")
    assert ends == (JobStatus.SUCCEEDED, "", "Succeeded", "info")
    assert journal.reasons()[-1] == "OutputsUploaded"
    assert (bucket / "model.pt").read_text() == "weights"
    # A job that ended before staging began has nothing to upload.
    assert upload_job_outputs(None, journal, JobStatus.FAILED, "x", "Failed", "error") == (
        JobStatus.FAILED, "x", "Failed", "error")  # fmt: skip
