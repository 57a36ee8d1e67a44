"""A container job whose supervisor is SIGKILLed: the next reader ends it, finishes every
rank record, and leaves no container and no process behind."""

from __future__ import annotations

import os
import signal

import psutil
import pytest

from tests.conftest import job_processes, wait_for
from tests.containers.test_container_jobs import labelled, submit
from workbench.spec import JobStatus, RankState

pytestmark = pytest.mark.timeout(1800)  # the first run builds the images (minutes)


def test_killed_supervisor_leaves_no_container(manager, engine, docker_client, tmp_path):
    submit(manager, ["python", "-c", "import time; time.sleep(600)"], tmp_path, name="orphan",
           workers=2)  # fmt: skip
    wait_for(lambda: len(labelled(docker_client, "orphan")) == 2, 90, "two containers")
    wait_for(lambda: all(c.status == "running" for c in labelled(docker_client, "orphan")), 30)
    sup = manager.backend().store.row("orphan")["details"]["supervisor_pid"]
    os.kill(sup, signal.SIGKILL)
    wait_for(lambda: not psutil.pid_exists(sup) or psutil.Process(sup).status() == "zombie")
    done = manager.get("orphan")
    assert done.status is JobStatus.FAILED
    assert "supervisor process ended unexpectedly" in done.message
    assert {x.state for x in done.ranks} == {RankState.STOPPED}
    assert all(x.finished_at for x in done.ranks)
    assert labelled(docker_client, "orphan") == []
    wait_for(lambda: job_processes("orphan") == [], 10, "wrappers and container processes gone")
