"""NamespaceWatch against the fake API server: each status change once, in order, across
server timeouts, dropped and stalled connections and 410 Gone."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from tests.fakes.kube_apiserver import FakeKubeAPIServer
from workbench.backends.kubernetes import watch
from workbench.backends.kubernetes.watch import NamespaceWatch, WatchEvent

NS = "team-a"
SELECTOR = "workbench.io/job"


class Recorder:
    """Collects delivered events (the watch's thread writes, the test reads)."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.lock = threading.Lock()

    def __call__(self, event: WatchEvent) -> None:
        with self.lock:
            self.events.append(event)

    def seen(self) -> list[tuple[str, str, str | None]]:
        """(type, name, phase) of every delivery."""
        with self.lock:
            return [
                (e.type, e.name, (e.object.get("status") or {}).get("phase")) for e in self.events
            ]

    def latest(self) -> dict[str, str | None]:
        """name -> last delivered phase (None once deleted)."""
        out: dict[str, str | None] = {}
        for kind, name, phase in self.seen():
            out[name] = None if kind == "DELETED" else phase
        return {k: v for k, v in out.items() if v is not None}


def wait_for(check: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll until ``check()`` holds (fails the test after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(0.02)


def pod(name: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {SELECTOR: name.rsplit("-", 1)[0], **(labels or {})}},
        "spec": {"containers": [{"name": "main", "image": "i"}]},
    }


def truth(fake: FakeKubeAPIServer) -> dict[str, str]:
    """name -> phase of every selected pod on the server."""
    items, _ = fake.state.list(("", "v1", "pods"), NS, SELECTOR)
    return {o["metadata"]["name"]: o["status"]["phase"] for o in items}


@pytest.fixture
def start(api_client: client.ApiClient) -> Any:
    """Start a pod watch; stopped after the test."""
    started: list[NamespaceWatch] = []

    def go(recorder: Recorder, **kwargs: Any) -> NamespaceWatch:
        w = watch.pods(api_client, NS, recorder, SELECTOR, max_backoff=0.2, **kwargs).start()
        started.append(w)
        assert w.wait_synced(10)
        return w

    yield go
    for w in started:
        w.stop()


def test_each_status_change_once_in_order(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer, start: Any
) -> None:
    v1 = client.CoreV1Api(api_client)
    v1.create_namespaced_pod(NS, pod("a-0"))
    v1.create_namespaced_pod(
        NS, {"metadata": {"name": "other"}, "spec": {"containers": [{"name": "m", "image": "i"}]}}
    )
    rec = Recorder()
    start(rec)
    kube_fake.set_pod_phase(NS, "a-0", "Running")
    v1.patch_namespaced_pod(
        "a-0", NS, {"metadata": {"labels": {"note": "x"}}}
    )  # not a status change
    kube_fake.set_pod_phase(NS, "a-0", "Succeeded")
    v1.create_namespaced_pod(NS, pod("b-0"))
    v1.delete_namespaced_pod("b-0", NS)
    wait_for(lambda: len(rec.seen()) >= 5)
    time.sleep(0.3)  # nothing more may come
    assert rec.seen() == [
        ("ADDED", "a-0", "Pending"),
        ("MODIFIED", "a-0", "Running"),
        ("MODIFIED", "a-0", "Succeeded"),
        ("ADDED", "b-0", "Pending"),
        ("DELETED", "b-0", "Pending"),
    ]
    rvs = [e.resource_version for e in rec.events]
    assert rvs == sorted(rvs)


def test_rewatches_after_the_server_closes_on_timeout(
    kube_fake: FakeKubeAPIServer, start: Any
) -> None:
    rec = Recorder()
    w = start(rec, timeout_seconds=1)
    kube_fake.state.create(("", "v1", "pods"), NS, pod("a-0"))
    wait_for(lambda: w.stats.watches >= 3)  # two server-side closes, each followed by a re-watch
    kube_fake.set_pod_phase(NS, "a-0", "Running")
    wait_for(lambda: rec.latest() == {"a-0": "Running"})
    assert w.stats.lists == 1 and w.stats.errors == 0
    assert rec.seen() == [("ADDED", "a-0", "Pending"), ("MODIFIED", "a-0", "Running")]


def test_resumes_after_dropped_connections(kube_fake: FakeKubeAPIServer, start: Any) -> None:
    rec = Recorder()
    w = start(rec)
    kube_fake.drop_next_watches(3, after_events=1)
    kube_fake.kick_watches()  # the open watch reconnects onto the new rule
    for i in range(4):
        kube_fake.state.create(("", "v1", "pods"), NS, pod(f"a-{i}"))
    for i in range(4):
        kube_fake.set_pod_phase(NS, f"a-{i}", "Running")
    wait_for(lambda: rec.latest() == truth(kube_fake) and len(truth(kube_fake)) == 4)
    assert w.stats.errors >= 1 and w.stats.lists == 1
    names = [n for _, n, _ in rec.seen()]
    assert sorted(names) == sorted([f"a-{i}" for i in range(4)] * 2)  # ADDED + Running, once each


def test_a_stalled_connection_is_replaced(kube_fake: FakeKubeAPIServer, start: Any) -> None:
    rec = Recorder()
    w = start(rec, read_timeout=0.5)
    kube_fake.state.faults.stall.set()
    kube_fake.state.create(("", "v1", "pods"), NS, pod("a-0"))
    wait_for(lambda: w.stats.errors >= 1)  # the read timed out: a new watch is opened
    assert rec.seen() == []
    kube_fake.state.faults.stall.clear()
    wait_for(lambda: rec.latest() == {"a-0": "Pending"})
    assert rec.seen() == [("ADDED", "a-0", "Pending")]


@pytest.mark.parametrize("as_http", [False, True])
def test_relists_after_410_and_delivers_only_the_differences(
    kube_fake: FakeKubeAPIServer, start: Any, as_http: bool
) -> None:
    state = kube_fake.state
    state.faults.expired_as_http = as_http
    for i in range(3):
        state.create(("", "v1", "pods"), NS, pod(f"a-{i}"))
    rec = Recorder()
    w = start(rec)
    wait_for(lambda: len(rec.seen()) == 3)
    state.faults.stall.set()  # changes happen while the watch is away
    kube_fake.set_pod_phase(NS, "a-0", "Running")
    state.delete(("", "v1", "pods"), NS, "a-1")
    state.create(("", "v1", "pods"), NS, pod("a-3"))
    state.delete(("", "v1", "pods"), NS, "a-2")
    state.create(("", "v1", "pods"), NS, pod("a-2"))  # same name, new uid
    state.compact(expire_watches=True)  # history is gone: resuming must fail with 410
    state.faults.stall.clear()
    wait_for(lambda: rec.latest() == truth(kube_fake) and w.stats.expired >= 1, timeout=20)
    assert w.stats.lists == 2
    # in resourceVersion order; the re-created a-2 is a new object: its old self goes first
    assert rec.seen()[3:] == [
        ("DELETED", "a-1", None),
        ("MODIFIED", "a-0", "Running"),
        ("ADDED", "a-3", "Pending"),
        ("DELETED", "a-2", None),
        ("ADDED", "a-2", "Pending"),
    ]


def test_watches_custom_resources_and_jobs(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    rec_pt, rec_job = Recorder(), Recorder()
    pt = watch.custom(api_client, "kubeflow.org", "v1", "pytorchjobs", NS, rec_pt, SELECTOR).start()
    jobs = watch.jobs(api_client, NS, rec_job, SELECTOR).start()
    try:
        assert pt.wait_synced(10) and jobs.wait_synced(10)
        labels = {"name": "x", "labels": {SELECTOR: "x"}}
        kube_fake.state.create(
            ("kubeflow.org", "v1", "pytorchjobs"), NS, {"metadata": labels, "spec": {}}
        )
        kube_fake.state.patch(("kubeflow.org", "v1", "pytorchjobs"), NS, "x",
                              {"status": {"conditions": [{"type": "Running"}]}}, "status")  # fmt: skip
        kube_fake.state.create(("batch", "v1", "jobs"), NS, {"metadata": labels, "spec": {}})
        wait_for(lambda: len(rec_pt.events) == 2 and len(rec_job.events) == 1)
        assert [e.type for e in rec_pt.events] == ["ADDED", "MODIFIED"]
        assert rec_pt.events[1].object["status"]["conditions"][0]["type"] == "Running"
    finally:
        pt.stop()
        jobs.stop()


def test_stop_returns_promptly_with_a_watch_open(kube_fake: FakeKubeAPIServer, start: Any) -> None:
    w = start(Recorder())
    wait_for(lambda: w.stats.watches == 1)
    t0 = time.monotonic()
    w.stop()
    assert time.monotonic() - t0 < 2 and not w._thread.is_alive()


def test_a_failing_callback_does_not_end_the_watch(
    kube_fake: FakeKubeAPIServer, start: Any
) -> None:
    rec = Recorder()

    def flaky(event: WatchEvent) -> None:
        if event.name == "bad-0":
            raise RuntimeError("boom")
        rec(event)

    start(flaky)
    kube_fake.state.create(("", "v1", "pods"), NS, pod("bad-0"))
    kube_fake.state.create(("", "v1", "pods"), NS, pod("good-0"))
    wait_for(lambda: rec.latest() == {"good-0": "Pending"})


def test_randomised_faults_over_200_jobs(kube_fake: FakeKubeAPIServer, start: Any) -> None:
    """Disconnects, stalls and 410s at random while 200 jobs move through their phases:
    the final statuses equal the server's and no job's terminal phase arrives twice."""
    rng = random.Random(12)
    state = kube_fake.state
    state.faults.bookmark_interval = 0.2
    rec = Recorder()
    w = start(rec, read_timeout=0.6, timeout_seconds=5)
    names = [f"job{i}-0" for i in range(200)]
    phases = {n: "Pending" for n in names}
    for n in names:
        state.create(("", "v1", "pods"), NS, pod(n))
    for step in range(600):
        n = rng.choice(names)
        if phases[n] == "Pending":
            phases[n] = "Running"
        elif phases[n] == "Running":
            phases[n] = rng.choice(["Succeeded", "Failed"])
        else:
            continue
        kube_fake.set_pod_phase(NS, n, phases[n])
        fault = rng.random()
        if fault < 0.01:
            state.compact(expire_watches=True)
        elif fault < 0.02:
            kube_fake.drop_next_watches(1, after_events=rng.randint(0, 5))
            kube_fake.kick_watches()
        elif fault < 0.025:
            state.faults.stall.set()
            time.sleep(0.7)  # past the read timeout
            state.faults.stall.clear()
        if step % 100 == 0:
            time.sleep(0.05)
    wait_for(lambda: rec.latest() == truth(kube_fake), timeout=60)
    assert rec.latest() == phases
    assert w.stats.expired >= 1 and w.stats.errors >= 1, w.stats
    terminal: dict[str, int] = {}
    last: dict[str, str | None] = {}
    for _, name, phase in rec.seen():
        assert last.get(name) != phase, f"{name} {phase} delivered twice in a row"
        last[name] = phase
        if phase in ("Succeeded", "Failed"):
            terminal[name] = terminal.get(name, 0) + 1
    assert all(count == 1 for count in terminal.values()), terminal
    order = {"Pending": 0, "Running": 1, "Succeeded": 2, "Failed": 2}
    for name in names:  # never backwards
        seq = [order[p] for _, n, p in rec.seen() if n == name and p]
        assert seq == sorted(seq), (name, seq)


@pytest.mark.parametrize(("interval", "lists"), [(0.1, 1), (1000.0, 2)])
def test_bookmarks_spare_a_relist_after_compaction(
    kube_fake: FakeKubeAPIServer, start: Any, interval: float, lists: int
) -> None:
    """Bookmarks move the watch's resourceVersion past changes it does not select, so a
    reconnect after those are compacted resumes instead of re-listing (without them the
    watch's version is too old and the server answers 410)."""
    state = kube_fake.state
    state.faults.bookmark_interval = interval
    rec = Recorder()
    w = start(rec)
    for i in range(5):  # unrelated objects move the resourceVersion on
        state.create(("", "v1", "secrets"), NS, {"metadata": {"name": f"s{i}"}})
    if interval < 1:
        wait_for(lambda: w.resource_version == str(state.rv))
    state.compact()
    kube_fake.kick_watches()
    state.create(("", "v1", "pods"), NS, pod("a-0"))
    wait_for(lambda: rec.latest() == {"a-0": "Pending"})
    assert (w.stats.lists, w.stats.expired) == (lists, lists - 1)
    assert (w.stats.bookmarks > 0) == (interval < 1)


def test_a_stop_landing_while_the_watch_request_is_made_ends_the_thread(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    """stop() between the watch request and the loop's hold on its response (the socket
    stop() shuts is not known yet) still ends the thread at once, not after the server's
    timeoutSeconds: a CLI waited at exit up to 2 s per watch for this."""
    kube_fake.state.faults.bookmark_interval = 60.0  # a real server's ~1 a minute
    w = watch.pods(api_client, NS, Recorder(), SELECTOR, timeout_seconds=60)
    inner = w._list_call

    def stopped_in_flight(**kwargs: Any) -> Any:
        resp = inner(**kwargs)
        if kwargs.get("watch"):
            w._stop.set()  # what stop() does first, before it looks for a response
        return resp

    w._list_call = stopped_in_flight
    w.start()
    assert w._thread is not None
    w._thread.join(10)  # the server would hold the watch open, silent, for 60 s
    alive = w._thread.is_alive()
    w.stop(timeout=0)  # (if it is still in the read: shut its socket, end the test)
    assert not alive
    assert w.stats.watches == 1
