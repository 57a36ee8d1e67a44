"""Store-level watch resilience: the namespace's watches (NamespaceTracker) writing the
store (JobSync) while the fake API server disconnects, stalls and expires them at random.

200 jobs' pods move through Pending, Running and Succeeded or Failed (their Jobs get the
matching condition, as the Job controller writes it). At the end every job's row and rank
row equal the server's truth and no job has its terminal transition (or its start, or a
rank's failure) recorded twice. The schedule is random with a printed seed;
WORKBENCH_WATCH_SEED=N replays one.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path

from kubernetes import client

from tests.conftest import wait_for
from tests.fakes.kube_apiserver import FakeKubeAPIServer
from workbench.backends.kubernetes.cluster import Cluster
from workbench.backends.kubernetes.config import load_settings
from workbench.backends.kubernetes.manifests import INDEX_ANNOTATION, LABEL_JOB
from workbench.backends.kubernetes.tracker import JobSync, NamespaceTracker
from workbench.spec import JobRecord, JobStatus
from workbench.store import JobStore

NS = "team-a"
JOBS, PODS = ("batch", "v1", "jobs"), ("", "v1", "pods")
EXPECTED = {"Pending": JobStatus.PENDING, "Running": JobStatus.RUNNING,
            "Succeeded": JobStatus.SUCCEEDED, "Failed": JobStatus.FAILED}  # fmt: skip


def make_job(fake: FakeKubeAPIServer, store: JobStore, name: str) -> None:
    """A stored job and its batch Job with one pod, as launch and the controller make them."""
    labels = {LABEL_JOB: name}
    job = fake.state.create(JOBS, NS, {"metadata": {"name": name, "labels": labels},
                                       "spec": {"completions": 1, "template": {}}})  # fmt: skip
    store.insert(JobRecord(name=name, status=JobStatus.PENDING, backend="kubernetes",
                           spec={"command": ["x"], "workers": 1}, runtime="pod", image="i",
                           details={"namespace": NS, "kind": "Job", "uid": job["metadata"]["uid"]}))  # fmt: skip
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job["metadata"]["uid"]}
    fake.state.create(PODS, NS, {"metadata": {
        "name": f"{name}-0-abcde", "labels": labels, "annotations": {INDEX_ANNOTATION: "0"},
        "ownerReferences": [owner]}, "spec": {"containers": [{"name": "main", "image": "i"}]}})  # fmt: skip


def advance(fake: FakeKubeAPIServer, name: str, phase: str) -> None:
    """Move the job's pod to ``phase``; a finished pod's Job gets its condition too."""
    pod, now = f"{name}-0-abcde", "2026-12-01T18:00:00Z"
    if phase == "Running":
        fake.set_pod_phase(NS, pod, "Running", startTime=now, containerStatuses=[
            {"name": "main", "state": {"running": {"startedAt": now}}}])  # fmt: skip
        return
    code = 0 if phase == "Succeeded" else 1
    fake.set_pod_phase(NS, pod, phase, containerStatuses=[{"name": "main", "state": {
        "terminated": {"exitCode": code, "finishedAt": now}}}])  # fmt: skip
    cond = "Complete" if phase == "Succeeded" else "Failed"
    fake.state.patch(JOBS, NS, name, {"status": {"conditions": [
        {"type": cond, "status": "True"}]}}, subresource="status")  # fmt: skip


def test_store_equals_the_server_after_random_faults_over_200_jobs(
    kube_fake: FakeKubeAPIServer, api_client: client.ApiClient, tmp_path: Path
) -> None:
    seed = int(os.environ.get("WORKBENCH_WATCH_SEED") or random.randrange(1 << 32))
    print(f"watch fault schedule seed: {seed} (WORKBENCH_WATCH_SEED={seed} replays it)")
    rng = random.Random(seed)
    state = kube_fake.state
    state.faults.bookmark_interval = 0.2
    store = JobStore(tmp_path / "jobs.db")
    cluster = Cluster(load_settings({}))
    cluster._api = api_client  # the client aimed at the fake (no kubeconfig needed)
    sync = JobSync(store, cluster, lambda *a: None)
    names = [f"job{i:03d}" for i in range(200)]
    for n in names:
        make_job(kube_fake, store, n)
    tracker = NamespaceTracker(cluster, NS, sync, read_timeout=0.5, timeout_seconds=5,
                               max_backoff=0.2).start()  # fmt: skip
    try:
        assert tracker.wait_synced(20)
        faults: Counter[str] = Counter()
        phases = dict.fromkeys(names, "Pending")
        live, step = list(names), 0
        while live:
            n = rng.choice(live)
            phases[n] = "Running" if phases[n] == "Pending" else rng.choice(["Succeeded", "Failed"])
            if phases[n] != "Running":
                live.remove(n)
            advance(kube_fake, n, phases[n])
            step += 1
            # At random, and each kind at least once (a stall at step 150, a 410 at 250).
            fault = {150: 0.021, 250: 0.0}.get(step, rng.random())
            if fault < 0.01:
                faults["410"] += 1
                state.compact(expire_watches=True)
            elif fault <= 0.02:
                faults["drop"] += 1
                kube_fake.drop_next_watches(2, after_events=rng.randint(0, 5))
                kube_fake.kick_watches()
            elif 0.02 < fault < 0.025:
                faults["stall"] += 1
                before = sum(w.stats.errors for w in tracker.watches)
                state.faults.stall.set()  # held until a watch gives up on its silent stream
                wait_for(lambda b=before: sum(w.stats.errors for w in tracker.watches) > b,
                         timeout=10, what="a stalled watch to time out")  # fmt: skip
                state.faults.stall.clear()
        state.compact(expire_watches=True)  # and a 410 while the last changes are in flight

        def statuses() -> dict[str, JobStatus]:
            return {r.name: r.status for r in store.list(with_events=False)}

        truth = {n: EXPECTED[p] for n, p in phases.items()}
        try:
            wait_for(lambda: statuses() == truth, timeout=60, what="the store to catch up")
        except AssertionError:
            wrong = [(n, s.value, truth[n].value) for n, s in statuses().items() if s != truth[n]]
            raise AssertionError(f"seed {seed}: {len(wrong)} jobs differ (job, store, server): "
                                 f"{wrong[:5]}") from None  # fmt: skip
        stats = [vars(w.stats) for w in tracker.watches]
        assert sum(s["expired"] for s in stats) >= 1 and sum(s["errors"] for s in stats) >= 1, (
            seed, faults, stats)  # fmt: skip
        for n in names:
            record = store.get(n)
            assert record is not None
            (rank,) = record.ranks
            assert rank.state.value == phases[n], (seed, n, rank)
            reasons = Counter(e.reason for e in record.events)
            terminal = reasons["Succeeded"] + reasons["Failed"]
            assert terminal == (1 if record.status.terminal else 0), (seed, n, record.events)
            assert reasons["Started"] == 1 and reasons["RankFailed"] <= 1, (seed, n, reasons)
    finally:
        tracker.stop()
        store.close()


def test_a_snapshot_taken_before_a_newer_one_is_never_written_after_it() -> None:
    """Each watch thread (and launch) syncs a job from a snapshot of what the watches hold.
    A thread stalled between its snapshot and its write must not land after a newer
    snapshot's write: the gang held Unschedulable was read back as Queued (the PodGroup
    before its condition) and stayed so, the flaky Volcano gang test's failure."""
    import threading

    from workbench.backends.kubernetes.watch import WatchEvent

    written: list[str] = []
    stalled, release = threading.Event(), threading.Event()

    class StallingSync:
        """Stalls its first sync before it takes its lock, as a thread can be descheduled."""

        lock = threading.RLock()

        def sync(self, job: str, workload: object, pods: object, gone: bool,
                 podgroup: dict[str, object] | None = None) -> None:  # fmt: skip
            if not stalled.is_set():
                stalled.set()
                assert release.wait(10)
            with self.lock:
                written.append(str((podgroup or {}).get("status")))

    tracker = NamespaceTracker(None, NS, StallingSync())  # type: ignore[arg-type]

    def podgroup(phase: str, rv: int) -> WatchEvent:
        obj = {"metadata": {"name": "g-uid", "labels": {LABEL_JOB: "g"}}, "status": phase}
        return WatchEvent("MODIFIED", "g-uid", NS, "pg-uid", rv, obj)

    old = threading.Thread(target=tracker._on_podgroup, args=(podgroup("Queued", 1),))
    old.start()
    assert stalled.wait(10)
    new = threading.Thread(target=tracker._on_podgroup, args=(podgroup("Unschedulable", 2),))
    new.start()
    new.join(0.3)  # with the stale write pending, the newer one must wait for it
    release.set()
    old.join(10)
    new.join(10)
    assert written[-1] == "Unschedulable", written
