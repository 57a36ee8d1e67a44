"""Operations on the Kubernetes backend against the fake cluster: a log follower that
rides out a gang restart, and cluster jobs on every surface as local jobs show them."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.fakes.kube_kubelet import FakeCluster
from tests.kubernetes import test_backend
from workbench.manager import JobManager
from workbench.spec import JobStatus

# The backend tests' fixtures: a kubeconfig at the fake, the fake cluster, a manager.
cluster = test_backend.cluster
jobs = test_backend.jobs
kube_env = test_backend.kube_env
spec = test_backend.spec


MARK = "[workbench] ---- attempt 2 ----"
LINES = [f"rank 0 line {i}" for i in range(4)]


def test_follow_continues_across_a_gang_restart(jobs: JobManager, cluster: FakeCluster) -> None:
    """The kubelet kills rank 0's first pod after its second line; the gang is retried
    (new workload, new pods) and one ``logs(follow=True)`` shows attempt 1, the attempt
    marker, then attempt 2 to its end, as the copy saved in the job folder holds them."""
    cluster.fail_pod_once("phoenix", 0, after="rank 0 line 1")
    jobs.submit(spec(["python", "rank_lines.py"], name="phoenix", workers=1, max_retries=1,
                     env={"LINES": "4", "GAP": "0.3"}))  # fmt: skip
    followed: list[str] = []
    done = threading.Event()

    def follow() -> None:
        followed.extend(jobs.logs("phoenix", rank=0, follow=True))
        done.set()

    threading.Thread(target=follow, daemon=True).start()
    final = jobs.wait("phoenix", timeout=90)
    assert final.status is JobStatus.SUCCEEDED and final.attempt == 2
    assert done.wait(30), f"the follower did not end: {followed}"
    assert MARK in followed, followed
    first, second = followed[: followed.index(MARK)], followed[followed.index(MARK) + 1 :]
    assert first == LINES[: len(first)] and len(first) >= 2, followed  # killed after line 1
    assert second == LINES, followed
    assert list(jobs.logs("phoenix", rank=0)) == followed  # the same as the saved copy
    events = [e.reason for e in final.events]
    assert "Restarting" in events and "RankFailed" in events
    copy = Path(final.job_dir or "") / "logs" / "rank-0.log"
    assert copy.read_text().splitlines() == followed
