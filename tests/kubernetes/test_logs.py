"""Pod logs through the official client against the fake API server: one rank followed,
every rank merged, tails, metric records kept out of the logs but recorded, a dropped
follow resumed exactly, and copies in the job folder that outlive the pods."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes.kube_apiserver import FakeKubeAPIServer
from tests.fakes.kube_kubelet import FakeCluster, wait_until
from workbench.backends.base import split_rank_prefix
from workbench.backends.kubernetes import logcopy
from workbench.backends.kubernetes.logcopy import LogCopier, job_logs, write_metric_records
from workbench.backends.kubernetes.logs import pod_lines, rank_logs
from workbench.backends.kubernetes.rest import CoreReads
from workbench.monitor.metrics import read_job_metrics
from workbench.monitor.stream import format_metric_line

NS = "team-a"


def make_pod(v1: client.CoreV1Api, name: str, rank: int) -> None:
    v1.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"workbench.io/job": "demo", "rank": str(rank)}},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    })  # fmt: skip


@pytest.fixture
def v1(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


class Collector:
    """Runs a generator in a thread and keeps what it yields (for followed streams)."""

    def __init__(self, gen: Iterator[str]) -> None:
        self.lines: list[str] = []
        self.done = threading.Event()
        self.error: BaseException | None = None

        def run() -> None:
            try:
                for line in gen:
                    self.lines.append(line)
            except BaseException as e:  # surfaced by the test
                self.error = e
            finally:
                self.done.set()

        threading.Thread(target=run, daemon=True).start()

    def wait_for(self, check: Callable[[list[str]], bool], timeout: float = 10.0) -> None:
        wait_until(lambda: self.error is not None or check(list(self.lines)), timeout)
        assert self.error is None, self.error

    def finish(self, timeout: float = 10.0) -> list[str]:
        assert self.done.wait(timeout), f"stream did not end; got {self.lines}"
        assert self.error is None, self.error
        return self.lines


def test_follow_one_rank_until_its_pod_ends(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    make_pod(v1, "demo-0", 0)
    kube_fake.set_pod_phase(NS, "demo-0", "Running")
    kube_fake.state.append_log(NS, "demo-0", "epoch 1\n", container="main")
    got = Collector(pod_lines(v1, NS, "demo-0", follow=True))
    got.wait_for(lambda lines: lines == ["epoch 1"])
    # A line in two writes, and a progress bar redrawn with \r, show as a terminal would.
    kube_fake.state.append_log(NS, "demo-0", "epo", container="main")
    kube_fake.state.append_log(NS, "demo-0", "ch 2\n10%\r50%\r100%\n", container="main")
    got.wait_for(lambda lines: len(lines) == 3)
    assert not got.done.is_set()  # still following: the pod runs
    kube_fake.state.append_log(NS, "demo-0", "done, no newline", container="main")
    kube_fake.set_pod_phase(NS, "demo-0", "Succeeded")
    assert got.finish() == ["epoch 1", "epoch 2", "100%", "done, no newline"]


def test_follow_resumes_a_dropped_stream_without_loss_or_repeats(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    make_pod(v1, "demo-0", 0)
    kube_fake.set_pod_phase(NS, "demo-0", "Running")
    kube_fake.state.append_log(NS, "demo-0", "a\nb\n", container="main")
    got = Collector(pod_lines(v1, NS, "demo-0", follow=True, retry_wait=0.05))
    got.wait_for(lambda lines: lines == ["a", "b"])
    # Cut mid-line, then cut again right after the re-opened stream's backlog.
    kube_fake.state.faults.log_drops = 2
    kube_fake.state.append_log(NS, "demo-0", "c\npart", container="main")
    wait_until(lambda: kube_fake.state.faults.log_drops == 0)
    kube_fake.state.append_log(NS, "demo-0", "ial\nd\n", container="main")
    kube_fake.state.append_log(NS, "demo-0", "e\n", container="main")
    got.wait_for(lambda lines: "e" in lines)
    kube_fake.set_pod_phase(NS, "demo-0", "Succeeded")
    follows = [p for m, p in kube_fake.state.requests if "/log" in p and "follow=true" in p]
    assert len(follows) >= 3  # two drops, two re-opens
    assert got.finish() == ["a", "b", "c", "partial", "d", "e"]


class Flaky:
    """The real client, with its next ``fail`` pod and pod-log calls failing as an
    unreachable or overloaded API server answers (refused connection, 503)."""

    def __init__(self, v1: client.CoreV1Api) -> None:
        self.v1, self.fail, self.failed = v1, 0, 0

    def _maybe_fail(self) -> None:
        if self.fail > 0:
            self.fail -= 1
            self.failed += 1
            if self.failed % 2:
                raise urllib3.exceptions.MaxRetryError(None, "/api", "connection refused")  # type: ignore[arg-type]
            raise ApiException(status=503, reason="Service Unavailable")

    def read_namespaced_pod_log(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail()
        return self.v1.read_namespaced_pod_log(*args, **kwargs)

    def read_namespaced_pod(self, *args: Any, **kwargs: Any) -> Any:
        self._maybe_fail()
        return self.v1.read_namespaced_pod(*args, **kwargs)


def test_follow_rides_out_an_unreachable_api_server(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    make_pod(v1, "demo-0", 0)
    kube_fake.set_pod_phase(NS, "demo-0", "Running")
    kube_fake.state.append_log(NS, "demo-0", "one\n", container="main")
    flaky = Flaky(v1)
    got = Collector(pod_lines(flaky, NS, "demo-0", follow=True, retry_wait=0.02))
    got.wait_for(lambda lines: lines == ["one"])
    flaky.fail = 6  # every call fails for a while: re-opens and phase checks alike
    kube_fake.state.faults.log_drops = 1
    kube_fake.state.append_log(NS, "demo-0", "two\n", container="main")
    wait_until(lambda: flaky.fail == 0)
    kube_fake.state.append_log(NS, "demo-0", "three\n", container="main")
    got.wait_for(lambda lines: "three" in lines)
    kube_fake.set_pod_phase(NS, "demo-0", "Succeeded")
    assert got.finish() == ["one", "two", "three"]
    assert flaky.failed == 6


def test_follow_ends_when_the_pod_is_deleted_and_stop_wakes_a_silent_reader(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    make_pod(v1, "demo-0", 0)
    make_pod(v1, "demo-1", 1)
    kube_fake.set_pod_phase(NS, "demo-0", "Running")
    kube_fake.state.append_log(NS, "demo-0", "x\n", container="main")
    got = Collector(pod_lines(v1, NS, "demo-0", follow=True))
    got.wait_for(lambda lines: lines == ["x"])
    v1.delete_namespaced_pod("demo-0", NS)
    assert got.finish() == ["x"]

    stop = threading.Event()
    silent = Collector(pod_lines(v1, NS, "demo-1", follow=True, stop=stop))
    time.sleep(0.3)  # let it block in its read: nothing is written
    t0 = time.monotonic()
    stop.set()
    assert silent.finish(timeout=3) == []
    assert time.monotonic() - t0 < 2.0


def test_tail_counts_lines_with_and_without_follow(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    make_pod(v1, "demo-0", 0)
    kube_fake.set_pod_phase(NS, "demo-0", "Running")
    kube_fake.state.append_log(
        NS, "demo-0", "".join(f"l{i}\n" for i in range(10)), container="main"
    )
    assert list(pod_lines(v1, NS, "demo-0", tail=3)) == ["l7", "l8", "l9"]
    assert list(pod_lines(v1, NS, "demo-0", tail=0)) == []
    got = Collector(pod_lines(v1, NS, "demo-0", follow=True, tail=2, retry_wait=0.05))
    got.wait_for(lambda lines: lines == ["l8", "l9"])  # the tail: read before following
    kube_fake.state.append_log(NS, "demo-0", "l10\n", container="main")
    got.wait_for(lambda lines: "l10" in lines)  # the follow is open and past its backlog
    kube_fake.state.faults.log_drops = 1  # a resumed follow after a tail skips exactly
    kube_fake.state.append_log(NS, "demo-0", "l11\n", container="main")
    wait_until(lambda: kube_fake.state.faults.log_drops == 0)
    kube_fake.state.append_log(NS, "demo-0", "l12\n", container="main")
    got.wait_for(lambda lines: "l12" in lines)
    kube_fake.set_pod_phase(NS, "demo-0", "Succeeded")
    assert got.finish() == ["l8", "l9", "l10", "l11", "l12"]


def test_tail_counts_user_lines_not_metric_records(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    make_pod(v1, "demo-0", 0)
    kube_fake.set_pod_phase(NS, "demo-0", "Running")
    gpu = format_metric_line({"kind": "gpu", "time": 1.0, "samples": []})
    body = "".join(f"u{i}\n" + gpu * 5 for i in range(6))  # 5 records after every line
    kube_fake.state.append_log(NS, "demo-0", body, container="main")
    records: list[dict[str, Any]] = []
    assert list(pod_lines(v1, NS, "demo-0", tail=3, on_record=records.append)) == [
        "u3", "u4", "u5"]  # fmt: skip
    assert records and all(r["kind"] == "gpu" for r in records)
    assert list(pod_lines(v1, NS, "demo-0", tail=100)) == [f"u{i}" for i in range(6)]
    got = Collector(pod_lines(v1, NS, "demo-0", follow=True, tail=2))
    got.wait_for(lambda lines: lines == ["u4", "u5"])
    kube_fake.state.append_log(NS, "demo-0", gpu + "u6\n", container="main")
    got.wait_for(lambda lines: lines == ["u4", "u5", "u6"])
    kube_fake.set_pod_phase(NS, "demo-0", "Succeeded")
    assert got.finish() == ["u4", "u5", "u6"]


def test_every_rank_merged_prefixed_and_metric_lines_recorded_not_shown(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    pods = {0: "demo-0", 1: "demo-1", 2: "demo-2"}
    for r, name in pods.items():
        make_pod(v1, name, r)
        kube_fake.set_pod_phase(NS, name, "Running")
    record = {"kind": "scalars", "step": 1, "loss": 0.5, "time": 1.0}
    kube_fake.state.append_log(
        NS, "demo-1", "start\n" + format_metric_line(record), container="main"
    )
    seen: list[tuple[int, dict[str, Any]]] = []
    got = Collector(rank_logs(v1, NS, lambda: pods, rank=None, follow=True,
                              on_record=lambda r, rec: seen.append((r, rec))))  # fmt: skip
    for r, name in pods.items():
        kube_fake.state.append_log(NS, name, f"hello from {r}\n", container="main")
    got.wait_for(lambda lines: len(lines) == 4)
    for name in pods.values():
        kube_fake.set_pod_phase(NS, name, "Succeeded")
    lines = got.finish()
    assert sorted(lines) == sorted(
        [
            "[rank 1] start",
            "[rank 0] hello from 0",
            "[rank 1] hello from 1",
            "[rank 2] hello from 2",
        ]
    )
    assert [split_rank_prefix(x) for x in lines if x.startswith("[rank 1]")] == [
        (1, "start"),
        (1, "hello from 1"),
    ]
    assert seen == [(1, record)]
    assert not any("wb-metric" in x for x in lines)
    # Without follow: ranks one after another, tail per rank, records still hidden.
    assert list(rank_logs(v1, NS, lambda: pods, rank=None, tail=1)) == [
        "[rank 0] hello from 0", "[rank 1] hello from 1", "[rank 2] hello from 2"]  # fmt: skip
    assert list(rank_logs(v1, NS, lambda: pods, rank=1)) == ["start", "hello from 1"]


def test_one_rank_waits_for_its_pod_and_follows_a_retry(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    pods: dict[int, str] = {}
    over = threading.Event()
    got = Collector(rank_logs(v1, NS, lambda: dict(pods), rank=0, follow=True,
                              finished=over.is_set, poll=0.05))  # fmt: skip
    time.sleep(0.2)
    make_pod(v1, "demo-0-a", 0)
    kube_fake.state.append_log(NS, "demo-0-a", "try 1\n", container="main")
    pods[0] = "demo-0-a"
    got.wait_for(lambda lines: lines == ["try 1"])
    make_pod(v1, "demo-0-b", 0)
    pods[0] = "demo-0-b"  # the controller replaced the failed pod
    kube_fake.set_pod_phase(NS, "demo-0-a", "Failed")
    kube_fake.state.append_log(NS, "demo-0-b", "try 2\n", container="main")
    got.wait_for(lambda lines: lines == ["try 1", "try 2"])
    kube_fake.set_pod_phase(NS, "demo-0-b", "Succeeded")
    over.set()
    assert got.finish() == ["try 1", "try 2"]


def test_a_slow_reader_holds_the_rank_readers_back(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer
) -> None:
    make_pod(v1, "demo-0", 0)
    kube_fake.set_pod_phase(NS, "demo-0", "Running")
    kube_fake.state.append_log(
        NS, "demo-0", "".join(f"{i}\n" for i in range(5000)), container="main"
    )
    kube_fake.set_pod_phase(NS, "demo-0", "Succeeded")
    stop = threading.Event()
    gen = rank_logs(v1, NS, lambda: {0: "demo-0"}, rank=None, follow=True, stop=stop)
    first = [next(gen) for _ in range(10)]
    assert first == [f"[rank 0] {i}" for i in range(10)]
    gen.close()  # the consumer went away: the reader thread ends instead of blocking
    wait_until(lambda: not any(t.name == "log-rank-0" for t in threading.enumerate()), 5)


def test_copy_on_end_then_pods_deleted_logs_and_metrics_still_read(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer, tmp_path: Path
) -> None:
    job_dir = tmp_path / "jobs" / "demo"
    pods = {0: "demo-0", 1: "demo-1"}
    gpu = {"kind": "gpu", "time": 2.0, "samples": [{"index": 0, "util": 90.0}]}
    for r, name in pods.items():
        make_pod(v1, name, r)
        body = (
            f"rank {r} line 1\n"
            + format_metric_line(
                {"kind": "scalars", "rank": r, "step": 1, "loss": 1.0 / (r + 1), "time": 1.0 + r}
            )
            + (format_metric_line(gpu) if r == 0 else "")
            + "bytes \xff\xfe kept\nlast, no newline"
        )
        kube_fake.state.append_log(NS, name, body.encode("latin-1"), container="main")
        kube_fake.set_pod_phase(NS, name, "Succeeded")
    copier = LogCopier(v1, NS, job_dir)
    sizes = copier.copy(pods)
    assert set(sizes) == {0, 1} and copier.copied(0) and copier.copied(1)
    raw = (job_dir / "logs" / "rank-0.log").read_bytes()
    assert raw == b"rank 0 line 1\nbytes \xff\xfe kept\nlast, no newline"  # byte for byte
    assert sizes[0] == len(raw)
    assert copier.copy(pods) == {}  # done once: a second call copies nothing again

    for name in pods.values():
        v1.delete_namespaced_pod(name, NS)
    wait_until(lambda: not v1.list_namespaced_pod(NS).items)
    assert list(job_logs(v1, NS, job_dir, lambda: {}, rank=1)) == [
        "rank 1 line 1", "bytes \ufffd\ufffd kept", "last, no newline"]  # fmt: skip
    merged = list(job_logs(v1, NS, job_dir, lambda: {}, rank=None, tail=1))
    assert merged == ["[rank 0] last, no newline", "[rank 1] last, no newline"]
    # Followed logs of an ended job come from the copy too, and end.
    assert list(job_logs(v1, NS, job_dir, lambda: {}, rank=0, follow=True, tail=1)) == [
        "last, no newline"
    ]
    metrics = read_job_metrics(job_dir)
    assert [(m["rank"], m["loss"]) for m in metrics["scalars"]] == [(0, 1.0), (1, 0.5)]
    assert metrics["gpu"] == [{"time": 2.0, "index": 0, "util": 90.0, "rank": 0}]


def test_a_retried_gang_keeps_every_attempt_in_order(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer, tmp_path: Path
) -> None:
    """Attempt 1's pods are copied before the retry deletes them; while attempt 2 runs,
    its rank shows attempt 1's copy then the live pod; at the end both are in the copy."""
    copier = LogCopier(v1, NS, tmp_path)
    make_pod(v1, "demo-0-a1", 0)
    kube_fake.state.append_log(NS, "demo-0-a1", "first try\nboom\n", container="main")
    kube_fake.set_pod_phase(NS, "demo-0-a1", "Failed")
    assert copier.copy({0: "demo-0-a1"}, attempt=1) == {0: len(b"first try\nboom\n")}
    v1.delete_namespaced_pod("demo-0-a1", NS)
    make_pod(v1, "demo-0-a2", 0)
    kube_fake.set_pod_phase(NS, "demo-0-a2", "Running")
    kube_fake.state.append_log(NS, "demo-0-a2", "second try\n", container="main")
    live = {0: "demo-0-a2"}
    assert list(job_logs(v1, NS, tmp_path, lambda: live, rank=0, attempt=2)) == [
        "first try", "boom", "second try"]  # fmt: skip
    assert list(job_logs(v1, NS, tmp_path, lambda: live, rank=None, attempt=2, tail=2)) == [
        "[rank 0] boom", "[rank 0] second try"]  # fmt: skip
    got = Collector(job_logs(v1, NS, tmp_path, lambda: live, rank=0, follow=True, attempt=2))
    got.wait_for(lambda lines: lines == ["first try", "boom", "second try"])
    kube_fake.state.append_log(NS, "demo-0-a2", "done\n", container="main")
    kube_fake.set_pod_phase(NS, "demo-0-a2", "Succeeded")
    assert got.finish() == ["first try", "boom", "second try", "done"]
    copier.copy(live, attempt=2)
    assert (tmp_path / "logs" / "rank-0.log").read_text() == (
        "first try\nboom\n[workbench] ---- attempt 2 ----\nsecond try\ndone\n"
    )
    v1.delete_namespaced_pod("demo-0-a2", NS)
    assert list(job_logs(v1, NS, tmp_path, lambda: {}, rank=0, attempt=2, tail=2)) == [
        "second try", "done"]  # fmt: skip


def test_a_staged_copy_is_kept_on_commit_and_leaves_nothing_on_discard(
    api_client: client.ApiClient, v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer,
    tmp_path: Path,
) -> None:  # fmt: skip
    """A cancel stages the running attempt's logs before its delete: discarded (the delete
    was refused) it leaves the copy, the marks and the metrics as they were, and logs read
    the live pod; committed, it is the copy. Copying an attempt again after a crash that
    left its mark unwritten holds it once. Read through rest.CoreReads, as the backend does."""
    core = CoreReads(api_client)
    copier = LogCopier(core, NS, tmp_path)
    make_pod(v1, "demo-0-a1", 0)
    kube_fake.state.append_log(NS, "demo-0-a1", "first try\n", container="main")
    kube_fake.set_pod_phase(NS, "demo-0-a1", "Failed")
    copier.copy({0: "demo-0-a1"}, attempt=1)
    make_pod(v1, "demo-0-a2", 0)
    kube_fake.set_pod_phase(NS, "demo-0-a2", "Running")
    kube_fake.state.append_log(NS, "demo-0-a2", "second try\n", container="main")
    log, before = tmp_path / "logs" / "rank-0.log", sorted(tmp_path.rglob("*"))
    copier.discard(copier.stage({0: "demo-0-a2"}, attempt=2))  # the cancel's delete refused
    assert sorted(tmp_path.rglob("*")) == before and log.read_text() == "first try\n"
    assert copier.copied_attempt(0) == 1
    live = {0: "demo-0-a2"}
    kube_fake.state.append_log(NS, "demo-0-a2", "done\n", container="main")
    assert list(job_logs(core, NS, tmp_path, lambda: live, rank=0, attempt=2)) == [
        "first try", "second try", "done"]  # fmt: skip
    assert copier.commit(copier.stage(live, attempt=2)) == {0: len(b"second try\ndone\n")}
    whole = "first try\n[workbench] ---- attempt 2 ----\nsecond try\ndone\n"
    assert log.read_text() == whole and copier.copied(0, attempt=2)
    (tmp_path / "logs" / ".copied-rank-0").write_text("1")  # a crash before the mark
    copier.copy(live, attempt=2)
    assert log.read_text() == whole


def test_a_deadline_cuts_a_staged_copy_short_and_keeps_the_logs_last_lines(
    api_client: client.ApiClient, v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer,
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """A cancel reads the logs for a bounded time: a rank whose log is still being read
    at the deadline is kept up to there, with a line saying so, then its last lines (the
    end of a runaway log says why it ran away); a rank not reached gets its last lines
    alone. (The clock is the copier's own: past the deadline after the first chunk, and
    within the tails' TAIL_SECONDS after it.)"""
    make_pod(v1, "demo-0", 0)
    make_pod(v1, "demo-1", 1)
    body = "".join(f"line {i}\n" for i in range(100_000))  # 8 chunks and more
    kube_fake.state.append_log(NS, "demo-0", body + "why it ran away\n", container="main")
    kube_fake.state.append_log(NS, "demo-1", "other\n" * 3 + "last of rank 1\n", container="main")
    ticks = iter([0.0, 0.0])  # rank 0 is reached and opened in time, then the deadline passes
    clock = SimpleNamespace(monotonic=lambda: next(ticks, 51.0))
    monkeypatch.setattr(logcopy, "time", clock)
    copier = LogCopier(CoreReads(api_client), NS, tmp_path)
    assert set(copier.commit(copier.stage({0: "demo-0", 1: "demo-1"}, deadline=50.0))) == {0, 1}
    head, _, tail = (tmp_path / "logs" / "rank-0.log").read_text().partition(logcopy.CUT_SHORT)
    assert head.startswith("line 0\nline 1\n") and 0 < head.count("\n") < 100_000
    assert tail.startswith(logcopy.TAIL_FOLLOWS) and tail.endswith("line 99999\nwhy it ran away\n")
    assert tail.count("\n") == logcopy.TAIL_LINES + 1  # the marker and the last lines
    rank1 = (tmp_path / "logs" / "rank-1.log").read_text()
    assert rank1 == logcopy.NOT_REACHED + "other\n" * 3 + "last of rank 1\n"
    assert copier.copied(0) and copier.copied(1)
    assert not list((tmp_path / "logs").glob("*.part"))

    # The tails' time spent too: rank 0 ends at the cut, rank 1 is not copied.
    other = tmp_path / "later"
    ticks = iter([0.0, 0.0])
    clock.monotonic = lambda: next(ticks, 100.0)
    copier = LogCopier(CoreReads(api_client), NS, other)
    assert set(copier.commit(copier.stage({0: "demo-0", 1: "demo-1"}, deadline=50.0))) == {0}
    assert (other / "logs" / "rank-0.log").read_text().endswith(logcopy.CUT_SHORT)
    assert not (other / "logs" / "rank-1.log").exists() and not copier.copied(1)


def test_job_logs_reads_the_pods_until_copied(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer, tmp_path: Path
) -> None:
    make_pod(v1, "demo-0", 0)
    kube_fake.state.append_log(NS, "demo-0", "live\n", container="main")
    assert list(job_logs(v1, NS, tmp_path, lambda: {0: "demo-0"}, rank=0)) == ["live"]
    assert list(job_logs(v1, NS, tmp_path, lambda: {}, rank=0)) == []


def test_copy_skips_a_pod_already_gone_and_retries_it_later(
    v1: client.CoreV1Api, kube_fake: FakeKubeAPIServer, tmp_path: Path
) -> None:
    copier = LogCopier(v1, NS, tmp_path)
    assert copier.copy({0: "never-was"}) == {}
    assert not copier.copied(0)
    make_pod(v1, "never-was", 0)
    kube_fake.state.append_log(NS, "never-was", "late\n", container="main")
    assert copier.copy({0: "never-was"}) == {0: 5}


def test_metric_records_route_to_the_files_local_jobs_use(tmp_path: Path) -> None:
    write_metric_records(tmp_path, 3, [
        {"kind": "scalars", "step": 2, "acc": 0.9, "time": 5.0},
        {"kind": "monitor", "state": "no_gpu", "reason": "none visible"},
    ])  # fmt: skip
    files = sorted(p.name for p in (tmp_path / "metrics").iterdir())
    assert files == ["agent-rank3.jsonl", "scalars-rank3.jsonl"]
    line = (tmp_path / "metrics" / "scalars-rank3.jsonl").read_text()
    assert json.loads(line) == {"step": 2, "acc": 0.9, "time": 5.0}
    assert read_job_metrics(tmp_path)["scalars"] == [{"step": 2, "acc": 0.9, "time": 5.0}]


def test_real_pods_on_the_fake_cluster_followed_then_copied(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer, tmp_path: Path
) -> None:
    """Processes the fake kubelet runs write user lines and framed records; all-rank follow
    shows the lines, the copy keeps them after the pods are deleted."""
    from tests.kubernetes.test_fake_cluster import make, submit

    script = (
        "import json, os, sys; r = os.environ['WORKBENCH_RANK']; print('hi from', r, flush=True); "
        "sys.stdout.write('\\x1f@wb-metric ' + json.dumps({'kind': 'scalars', 'step': 1, "
        "'loss': 0.1, 'time': 1.0}) + '\\n'); print('bye from', r)"
    )
    cluster = FakeCluster(kube_fake, tmp_path / "cluster", grace=2).start()
    try:
        job = make(["python", "-c", script], workers=2)
        submit(api_client, job)
        v1 = client.CoreV1Api(api_client)

        def pods() -> dict[int, str]:
            out = {}
            for p in v1.list_namespaced_pod(NS).items:
                idx = (p.metadata.annotations or {}).get("batch.kubernetes.io/job-completion-index")
                if idx is not None:
                    out[int(idx)] = p.metadata.name
            return out

        wait_until(lambda: len(pods()) == 2, 30)
        lines = list(rank_logs(v1, NS, pods, rank=None, follow=True, world=2))
        assert sorted(lines) == ["[rank 0] bye from 0", "[rank 0] hi from 0",
                                 "[rank 1] bye from 1", "[rank 1] hi from 1"]  # fmt: skip
        job_dir = tmp_path / "job"
        LogCopier(v1, NS, job_dir).copy(pods())
        batch = client.BatchV1Api(api_client)
        batch.delete_namespaced_job("demo", NS, propagation_policy="Foreground")
        wait_until(lambda: not pods(), 30)
        assert list(job_logs(v1, NS, job_dir, pods, rank=1)) == ["hi from 1", "bye from 1"]
        assert len(read_job_metrics(job_dir)["scalars"]) == 2
    finally:
        cluster.stop()
