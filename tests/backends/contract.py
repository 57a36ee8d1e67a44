"""One conformance suite for every backend and runtime, through the public interface only.

Like fsspec's shared filesystem tests: ``BackendContract`` holds the cases and is never
collected itself (its name does not start with ``Test`` and this module is not a test
file). A concrete subclass per backend/runtime provides the ``jobs`` fixture (a JobManager
wired to that backend) and sets ``runtime``; tests/backends/test_contract_process.py and
tests/containers/test_contract_container.py are the two today, and the Kubernetes backend
adds a third when it lands.

The cases use only what every backend offers: submit, get, list, cancel, logs of one rank
and of every rank (``rank=None``), and wait. No store rows, job folders or PIDs; the one
extra is ``job_processes`` after a cancel, an observation of this host, not of the backend.

``test_change_feed_reports_pending_running_succeeded`` subscribes to the manager's change
feed before submitting and checks the feed carries every state of the job, whichever
backend wrote it (a backend that learns state from outside writes it into the store).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import job_processes, wait_for
from workbench.errors import JobNotFoundError
from workbench.manager import JobManager
from workbench.spec import JobRecord, JobStatus, RankState, TrainSpec

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
TIMEOUT = 90.0  # per job; a container job starts in ~1 s, a process one in less


class BackendContract:
    """What every backend (and every runtime of one) must do; subclass with a ``jobs``
    fixture and a ``runtime``."""

    runtime: str = "process"
    image: str = "pytorch:2.13-cpu"

    @pytest.fixture
    def jobs(self) -> JobManager:
        """The JobManager to test; each subclass wires it to its backend."""
        raise NotImplementedError("a BackendContract subclass provides the jobs fixture")

    # ---- helpers --------------------------------------------------------------------------
    def submit(self, jobs: JobManager, command: list[str], **kw: Any) -> JobRecord:
        """Submit ``command`` (run in tests/scripts) on this runtime; return the record."""
        kw.setdefault("working_dir", str(SCRIPTS))
        kw.setdefault("workers", 2)
        spec = {"command": command, "runtime": self.runtime, "image": self.image, **kw}
        return jobs.submit(TrainSpec.from_dict(spec))

    def finish(self, jobs: JobManager, name: str) -> JobRecord:
        """Wait for ``name`` to end; fail naming its state if it does not in time."""
        done = jobs.wait(name, timeout=TIMEOUT)
        assert done.status.terminal, f"{name} still {done.status.value} after {TIMEOUT:g}s"
        return done

    # ---- cases ----------------------------------------------------------------------------
    def test_submit_runs_to_succeeded(self, jobs: JobManager) -> None:
        record = self.submit(jobs, ["python", "fail_rank.py"], name="ok", env={"FAIL_RANK": "9"})
        assert record.name == "ok", record.name
        # submit returns before the job ends; on a cluster backend a job this quick may
        # already have succeeded by then (its status comes from the watch), never failed.
        assert not record.status.terminal or record.status is JobStatus.SUCCEEDED, (
            record.status,
            record.message,
        )
        assert record.runtime == self.runtime
        assert "ok" in [r.name for r in jobs.list()]
        done = self.finish(jobs, "ok")
        assert done.status is JobStatus.SUCCEEDED, done.message
        assert [(x.rank, x.state, x.exit_code) for x in done.ranks] == [
            (0, RankState.SUCCEEDED, 0),
            (1, RankState.SUCCEEDED, 0),
        ]
        assert done.started_at is not None and done.finished_at is not None
        assert done.created_at <= done.started_at <= done.finished_at
        assert [r.name for r in jobs.list(status=["Succeeded"])] == ["ok"]

    def test_change_feed_reports_pending_running_succeeded(self, jobs: JobManager) -> None:
        # Subscribe before submitting, as a surface does: the feed must carry the job's
        # every state (a fast look, so Pending is seen before the runner starts).
        since = jobs.last_change_id()
        stop = threading.Event()
        seen: list[JobRecord] = []

        def follow() -> None:
            for batch in jobs.watch(since, stop=stop, timeout=TIMEOUT, interval=0.005):
                seen.extend(r for r in batch.jobs if r.name == "feed")
                if seen and seen[-1].status.terminal:
                    return

        watcher = threading.Thread(target=follow)
        watcher.start()
        try:
            self.submit(jobs, ["python", "-c", "import time; time.sleep(1.5)"], name="feed")
            watcher.join(TIMEOUT)
        finally:
            stop.set()
            watcher.join(10)
        statuses = [r.status.value for r in seen]
        assert [s for i, s in enumerate(statuses) if i == 0 or s != statuses[i - 1]] == [
            "Pending",
            "Running",
            "Succeeded",
        ], statuses
        done = seen[-1]  # the feed's record is the whole record, events included
        assert [e.reason for e in done.events] == ["Submitted", "Started", "Succeeded"]
        times = [e.time for e in done.events]
        assert times == sorted(times)
        assert done.to_dict() == jobs.get("feed").to_dict()

    def test_failing_rank_fails_job_and_stops_the_others(self, jobs: JobManager) -> None:
        self.submit(jobs, ["python", "fail_rank.py"], name="gang",
                    env={"FAIL_RANK": "1", "FAIL_CODE": "3", "OTHER_SLEEP": "600"})  # fmt: skip
        done = self.finish(jobs, "gang")
        assert done.status is JobStatus.FAILED
        assert done.message == "rank 1 exited with code 3"
        by_rank = {x.rank: x for x in done.ranks}
        assert by_rank[1].state is RankState.FAILED and by_rank[1].exit_code == 3
        assert by_rank[0].state is RankState.STOPPED  # it slept 600 s: the gang stopped it
        assert "rank 1 failing on purpose" in list(jobs.logs("gang", rank=1))
        assert "rank 0 finished" not in list(jobs.logs("gang", rank=0))
        assert "RankFailed" in [e.reason for e in done.events]
        assert job_processes("gang") == []

    def test_retries_restart_the_gang_until_it_succeeds(self, jobs: JobManager) -> None:
        self.submit(jobs, ["python", "fail_rank.py"], name="retry", max_retries=2,
                    env={"FAIL_RANK": "0", "FAIL_UNTIL": "1"})  # fmt: skip
        done = self.finish(jobs, "retry")
        assert done.status is JobStatus.SUCCEEDED, done.message
        assert done.attempt == 2
        reasons = [e.reason for e in done.events]
        assert reasons.count("Restarting") == 1 and reasons.count("Started") == 2
        log0 = list(jobs.logs("retry", rank=0))
        assert "rank 0 attempt 1 started" in log0 and "rank 0 attempt 2 started" in log0
        assert "[workbench] ---- attempt 2 ----" in log0
        assert log0[-1] == "rank 0 finished"

    def test_retries_exhausted_fail_the_job(self, jobs: JobManager) -> None:
        self.submit(jobs, ["python", "fail_rank.py"], name="exhaust", max_retries=1,
                    env={"FAIL_RANK": "1", "FAIL_CODE": "4"})  # fmt: skip
        done = self.finish(jobs, "exhaust")
        assert done.status is JobStatus.FAILED
        assert done.attempt == 2  # the first run and one retry, then no more
        assert done.message == "rank 1 exited with code 4"
        assert [e.reason for e in done.events].count("Started") == 2

    def test_cancel_returns_at_once_and_stops_every_rank(self, jobs: JobManager) -> None:
        self.submit(jobs, ["python", "sleeper.py"], name="stopme")

        def all_running() -> bool:
            ranks = jobs.get("stopme").ranks
            return len(ranks) == 2 and all(x.state is RankState.RUNNING for x in ranks)

        wait_for(all_running, timeout=TIMEOUT, what="both ranks Running")
        wait_for(lambda: list(jobs.logs("stopme", rank=1)), timeout=30, what="rank 1 output")
        t0 = time.monotonic()
        asked = jobs.cancel("stopme", wait=0)
        took = time.monotonic() - t0
        # "At once": no waiting for the gang; generous only for a loaded 2-core machine.
        assert took < 2.0, f"cancel(wait=0) blocked {took:.2f}s"
        # The stop under way is recorded before cancel returns (or it is already over).
        assert asked.status in (JobStatus.CANCELLING, JobStatus.CANCELLED)
        done = self.finish(jobs, "stopme")
        assert done.status is JobStatus.CANCELLED
        assert {x.state for x in done.ranks} == {RankState.STOPPED}
        reasons = [e.reason for e in done.events]
        assert "Cancelling" in reasons and "Cancelled" in reasons
        assert reasons.index("Cancelling") < reasons.index("Cancelled")
        # A cancel of an ended job changes nothing.
        assert jobs.cancel("stopme", wait=0).status is JobStatus.CANCELLED
        # The extra: nothing of the job (grandchildren included) is left on this host.
        wait_for(lambda: job_processes("stopme") == [], timeout=30, what="no job processes")

    def test_admit_has_no_side_effects_and_launch_runs_the_plan(self, jobs: JobManager) -> None:
        before = [r.name for r in jobs.list()]
        spec = TrainSpec.from_dict({"command": ["python", "fail_rank.py"], "name": "admitted",
                                    "runtime": self.runtime, "image": self.image, "workers": 2,
                                    "working_dir": str(SCRIPTS), "env": {"FAIL_RANK": "9"}})  # fmt: skip
        plan = jobs.admit(spec)
        assert plan.name == "admitted" and plan.runtime == self.runtime
        assert [p.rank for p in plan.placement] == [0, 1]
        assert [r.name for r in jobs.list()] == before  # nothing recorded
        with pytest.raises(JobNotFoundError):
            jobs.get("admitted")
        again = jobs.admit(TrainSpec.from_dict({**spec.to_dict(), "name": "admitted"}))
        assert again.name == "admitted"  # admitting reserved no name
        record = jobs.launch(plan)
        assert record.name == "admitted" and record.runtime == self.runtime
        done = self.finish(jobs, "admitted")
        assert done.status is JobStatus.SUCCEEDED, done.message

    def test_logs_of_one_rank_and_of_every_rank(self, jobs: JobManager) -> None:
        self.submit(jobs, ["python", "rank_lines.py"], name="chatty", env={"LINES": "5"})
        done = self.finish(jobs, "chatty")
        assert done.status is JobStatus.SUCCEEDED, done.message
        want = {r: [f"rank {r} line {i}" for i in range(5)] for r in (0, 1)}
        assert list(jobs.logs("chatty", rank=0)) == want[0]
        assert list(jobs.logs("chatty", rank=1)) == want[1]
        every = list(jobs.logs("chatty", rank=None))
        for r in (0, 1):  # each rank's lines, prefixed, in that rank's order
            assert [x for x in every if x.startswith(f"[rank {r}] ")] == [
                f"[rank {r}] {line}" for line in want[r]
            ], every
        assert len(every) == 10
        assert list(jobs.logs("chatty", rank=1, tail=2)) == want[1][-2:]
        tails = list(jobs.logs("chatty", rank=None, tail=1))  # tail counts per rank
        assert sorted(tails) == ["[rank 0] rank 0 line 4", "[rank 1] rank 1 line 4"]

    def test_logs_follow_until_the_job_ends(self, jobs: JobManager) -> None:
        self.submit(jobs, ["python", "rank_lines.py"], name="follow", workers=1,
                    env={"LINES": "20", "GAP": "0.02"})  # fmt: skip
        followed = list(jobs.logs("follow", rank=0, follow=True))
        assert followed == [f"rank 0 line {i}" for i in range(20)]
        assert jobs.get("follow").status is JobStatus.SUCCEEDED

    def test_env_contract_reaches_every_rank(self, jobs: JobManager) -> None:
        self.submit(jobs, ["python", "show_env.py"], name="envs", env={"LR": "0.1"})
        done = self.finish(jobs, "envs")
        assert done.status is JobStatus.SUCCEEDED, done.message
        envs = []
        for r in (0, 1):
            line = next(x for x in jobs.logs("envs", rank=r) if x.startswith("ENV "))
            envs.append(json.loads(line[4:]))
        assert len({e["MASTER_PORT"] for e in envs}) == 1  # one rendezvous for the gang
        for r, e in enumerate(envs):
            assert e["RANK"] == e["PET_NODE_RANK"] == e["WORKBENCH_RANK"] == str(r)
            assert e["WORLD_SIZE"] == e["PET_NNODES"] == "2" and e["PET_NPROC_PER_NODE"] == "1"
            assert e["MASTER_ADDR"] == e["PET_MASTER_ADDR"] == "127.0.0.1"
            assert e["MASTER_PORT"] == e["PET_MASTER_PORT"]
            assert e["LR"] == "0.1" and e["WORKBENCH_JOB_NAME"] == "envs"
