"""The local backend's contract, run on both runtimes: processes and Podman containers.

One class, parametrized by runtime, so a case written once proves both (as fsspec runs one
conformance suite against every filesystem).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import job_processes
from workbench.spec import JobStatus, RankState, TrainSpec

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
IMAGE = "pytorch:2.13-cpu"

pytestmark = pytest.mark.timeout(1800)  # the first run builds the images (minutes)


@pytest.fixture(params=["process", "container"])
def runtime(request: pytest.FixtureRequest) -> str:
    """Each case runs once per runtime; the container one on the session's Podman."""
    if request.param == "container":
        request.getfixturevalue("engine")
    return str(request.param)


def submit(manager, runtime, command, **kw):
    kw.setdefault("working_dir", str(SCRIPTS))
    spec = {"command": command, "runtime": runtime, "image": IMAGE, **kw}
    record = manager.submit(TrainSpec.from_dict(spec))
    assert record.runtime == runtime
    return record


def log_lines(manager, name, rank=0):
    return list(manager.logs(name, rank=rank))


class TestRuntimeContract:
    """What every runtime of the local backend must do."""

    def test_failing_rank_fails_job_and_stops_the_others(self, manager, runtime):
        submit(manager, runtime, ["python", "fail_rank.py"], name="gang", workers=2,
               env={"FAIL_RANK": "1", "FAIL_CODE": "3", "OTHER_SLEEP": "600"})  # fmt: skip
        done = manager.wait("gang", timeout=90)
        assert done.status is JobStatus.FAILED
        assert done.message == "rank 1 exited with code 3"
        by_rank = {x.rank: x for x in done.ranks}
        assert by_rank[1].state is RankState.FAILED and by_rank[1].exit_code == 3
        assert by_rank[0].state is RankState.STOPPED
        assert "rank 1 failing on purpose" in log_lines(manager, "gang", 1)
        assert job_processes("gang") == []
        assert "RankFailed" in [e.reason for e in done.events]

    def test_retries_restart_the_gang(self, manager, runtime):
        submit(manager, runtime, ["python", "fail_rank.py"], name="retry", workers=2,
               max_retries=2, env={"FAIL_RANK": "0", "FAIL_UNTIL": "1"})  # fmt: skip
        done = manager.wait("retry", timeout=90)
        assert done.status is JobStatus.SUCCEEDED, done.message
        assert done.attempt == 2
        reasons = [e.reason for e in done.events]
        assert reasons.count("Restarting") == 1 and reasons.count("Started") == 2
        log0 = log_lines(manager, "retry", 0)
        assert "rank 0 attempt 1 started" in log0 and "[workbench] ---- attempt 2 ----" in log0
        assert log0[-1] == "rank 0 finished"

    def test_logs_follow_and_tail(self, manager, runtime):
        code = "import time\nfor i in range(20):\n print('line', i, flush=True); time.sleep(0.02)"
        submit(manager, runtime, ["python", "-c", code], name="chatty", workers=1)
        followed = list(manager.logs("chatty", follow=True))
        assert followed == [f"line {i}" for i in range(20)]
        assert list(manager.logs("chatty", tail=2)) == ["line 18", "line 19"]
        assert manager.get("chatty").status is JobStatus.SUCCEEDED

    def test_contract_env_and_user_env_reach_every_rank(self, manager, runtime):
        code = (
            "import os\n"
            "keys = ['WORKBENCH_RANK', 'RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'GREETING']\n"
            "print(' '.join(k + '=' + os.environ.get(k, '-') for k in keys))\n"
            "print('VENV=' + os.environ.get('VIRTUAL_ENV', '-'))\n"
        )
        submit(manager, runtime, ["python", "-c", code], name="envs", workers=2,
               env={"GREETING": "hi"})  # fmt: skip
        done = manager.wait("envs", timeout=90)
        assert done.status is JobStatus.SUCCEEDED, done.message
        for rank in (0, 1):
            lines = log_lines(manager, "envs", rank)
            assert (
                f"WORKBENCH_RANK={rank} RANK={rank} WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 GREETING=hi"
                in lines
            ), lines
            if runtime == "container":  # the host's virtualenv stays on the host
                assert "VENV=-" in lines, lines

    def test_cancel_stops_every_rank(self, manager, runtime):
        submit(manager, runtime, ["python", "-c", "import time; time.sleep(600)"],
               name="stopme", workers=2)  # fmt: skip
        deadline = time.time() + 60
        while manager.get("stopme").status is not JobStatus.RUNNING and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # let the workers (containers) come up
        done = manager.cancel("stopme")
        assert done.status is JobStatus.CANCELLED
        assert {x.state for x in done.ranks} == {RankState.STOPPED}
        assert job_processes("stopme") == []
