"""The fake API server behaves as Kubernetes does, as seen through the official client."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.fakes.kube_apiserver import KUBELET_FINALIZER, FakeKubeAPIServer

NS = "team-a"


def pod(name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    """A minimal pod manifest."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, **meta},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


def pytorchjob(name: str) -> dict[str, Any]:
    """A minimal PyTorchJob."""
    tmpl = {"spec": {"containers": [{"name": "pytorch", "image": "pytorch"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "labels": {"app": "wb"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": tmpl}}},
    }


def test_create_get_list_and_status_codes(api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    created = v1.create_namespaced_pod(NS, pod("p1", {"app": "a"}))
    assert created.metadata.uid and created.status.phase == "Pending"
    assert (
        v1.read_namespaced_pod("p1", NS).metadata.resource_version
        == created.metadata.resource_version
    )
    with pytest.raises(ApiException) as e409:
        v1.create_namespaced_pod(NS, pod("p1"))
    assert e409.value.status == 409
    assert json.loads(e409.value.body)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as e404:
        v1.read_namespaced_pod("nope", NS)
    assert e404.value.status == 404
    status = json.loads(e404.value.body)
    assert status["kind"] == "Status" and status["reason"] == "NotFound" and status["code"] == 404
    assert status["message"] == 'pods "nope" not found'
    # other namespaces are separate
    assert v1.list_namespaced_pod("other").items == []
    assert [p.metadata.name for p in v1.list_namespaced_pod(NS).items] == ["p1"]


def test_resource_version_only_goes_up(api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    seen = []
    for i in range(5):
        seen.append(int(v1.create_namespaced_pod(NS, pod(f"p{i}")).metadata.resource_version))
    seen.append(
        int(
            v1.patch_namespaced_pod(
                "p0", NS, {"metadata": {"labels": {"x": "1"}}}
            ).metadata.resource_version
        )
    )
    listed = int(v1.list_namespaced_pod(NS).metadata.resource_version)
    assert seen == sorted(seen) and len(set(seen)) == len(seen) and listed == seen[-1]


def test_stale_update_is_a_conflict(api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    p = v1.create_namespaced_pod(NS, pod("p"))
    v1.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"a": "b"}}})
    p.metadata.labels = {"c": "d"}
    with pytest.raises(ApiException) as e:
        v1.replace_namespaced_pod("p", NS, p)
    assert e.value.status == 409 and "Conflict" in e.value.body


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=a", {"a1", "a2"}),
        ("app==a", {"a1", "a2"}),
        ("app!=a", {"b1", "none"}),
        ("app in (a,b)", {"a1", "a2", "b1"}),
        ("app notin (a)", {"b1", "none"}),
        ("tier", {"a2"}),
        ("!tier", {"a1", "b1", "none"}),
        ("app=a,tier=web", {"a2"}),
        ("app in (a, b),!tier", {"a1", "b1"}),
    ],
)
def test_label_selectors(api_client: client.ApiClient, selector: str, expected: set[str]) -> None:
    v1 = client.CoreV1Api(api_client)
    v1.create_namespaced_pod(NS, pod("a1", {"app": "a"}))
    v1.create_namespaced_pod(NS, pod("a2", {"app": "a", "tier": "web"}))
    v1.create_namespaced_pod(NS, pod("b1", {"app": "b"}))
    v1.create_namespaced_pod(NS, pod("none"))
    got = {p.metadata.name for p in v1.list_namespaced_pod(NS, label_selector=selector).items}
    assert got == expected


def test_bad_selector_is_400(api_client: client.ApiClient) -> None:
    with pytest.raises(ApiException) as e:
        client.CoreV1Api(api_client).list_namespaced_pod(NS, label_selector="app in a")
    assert e.value.status == 400


def test_batch_jobs_services_secrets_events_and_custom_resources(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    batch, v1 = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    custom = client.CustomObjectsApi(api_client)
    job = batch.create_namespaced_job(NS, {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "i"}]}}},
    })  # fmt: skip
    assert job.kind == "Job" and batch.read_namespaced_job("j", NS).metadata.uid == job.metadata.uid
    svc = v1.create_namespaced_service(
        NS, {"metadata": {"name": "s"}, "spec": {"clusterIP": "None"}}
    )
    assert svc.spec.cluster_ip == "None"
    v1.create_namespaced_secret(NS, {"metadata": {"name": "cred"}, "stringData": {"K": "v"}})
    assert v1.read_namespaced_secret("cred", NS).data == {"K": "dg=="}
    created = custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", NS, "pytorchjobs", pytorchjob("pt")
    )
    assert created["metadata"]["resourceVersion"] and created["kind"] == "PyTorchJob"
    got = custom.get_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", "pt")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(ApiException) as e:
        custom.create_namespaced_custom_object(
            "kubeflow.org", "v1", NS, "pytorchjobs", pytorchjob("pt")
        )
    assert e.value.status == 409
    running = {"status": {"conditions": [{"type": "Running", "status": "True"}]}}
    custom.patch_namespaced_custom_object_status(
        "kubeflow.org", "v1", NS, "pytorchjobs", "pt", running
    )
    listed = custom.list_namespaced_custom_object(
        "kubeflow.org", "v1", NS, "pytorchjobs", label_selector="app=wb"
    )
    assert [o["status"]["conditions"][0]["type"] for o in listed["items"]] == ["Running"]
    kube_fake.record_event(
        NS, got, "FailedScheduling", "0/3 nodes are available: insufficient nvidia.com/gpu"
    )
    events = v1.list_namespaced_event(NS, field_selector="involvedObject.name=pt").items
    assert [(ev.reason, ev.message) for ev in events] == [
        ("FailedScheduling", "0/3 nodes are available: insufficient nvidia.com/gpu")
    ]
    groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"batch", "kubeflow.org"} <= groups


def _watch_events(api_client: client.ApiClient, **kwargs: Any) -> list[tuple[str, str, str]]:
    """(type, name, resourceVersion) of every event until the server closes the watch."""
    v1 = client.CoreV1Api(api_client)
    out = []
    for ev in watch.Watch().stream(v1.list_namespaced_pod, NS, **kwargs):
        meta = ev["raw_object"]["metadata"]
        out.append((ev["type"], meta.get("name", ""), meta["resourceVersion"]))
    return out


def test_watch_resumes_from_resource_version(api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    v1.create_namespaced_pod(NS, pod("old"))
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    v1.create_namespaced_pod(NS, pod("new"))
    v1.patch_namespaced_pod("old", NS, {"metadata": {"labels": {"x": "y"}}})
    v1.delete_namespaced_pod("new", NS)
    events = _watch_events(api_client, resource_version=rv, timeout_seconds=1)
    assert [(t, n) for t, n, _ in events] == [
        ("ADDED", "new"),
        ("MODIFIED", "old"),
        ("DELETED", "new"),
    ]
    rvs = [int(r) for _, _, r in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)
    # resuming from the middle replays only what came after
    later = _watch_events(api_client, resource_version=str(rvs[0]), timeout_seconds=1)
    assert [(t, n) for t, n, _ in later] == [("MODIFIED", "old"), ("DELETED", "new")]


def test_watch_without_resource_version_starts_with_synthetic_adds(
    api_client: client.ApiClient,
) -> None:
    v1 = client.CoreV1Api(api_client)
    v1.create_namespaced_pod(NS, pod("a", {"app": "x"}))
    v1.create_namespaced_pod(NS, pod("b", {"app": "y"}))
    events = _watch_events(api_client, label_selector="app=x", timeout_seconds=1)
    assert [(t, n) for t, n, _ in events] == [("ADDED", "a")]


def test_watch_with_selector_sees_objects_enter_and_leave(api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    v1.create_namespaced_pod(NS, pod("p", {"app": "other"}))
    v1.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "x"}}})
    v1.patch_namespaced_pod("p", NS, {"metadata": {"labels": {"app": "gone"}}})
    events = _watch_events(
        api_client, resource_version=rv, label_selector="app=x", timeout_seconds=1
    )
    assert [(t, n) for t, n, _ in events] == [("ADDED", "p"), ("DELETED", "p")]


def test_watch_closes_cleanly_on_timeout(api_client: client.ApiClient) -> None:
    start = time.monotonic()
    assert _watch_events(api_client, resource_version="0", timeout_seconds=1) == []
    assert 0.9 <= time.monotonic() - start < 3


def test_bookmarks_carry_the_latest_resource_version(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    kube_fake.state.faults.bookmark_interval = 0.2
    v1 = client.CoreV1Api(api_client)
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    v1.create_namespaced_secret(NS, {"metadata": {"name": "unrelated"}})  # moves rv, not pods
    latest = (
        client.CoreV1Api(api_client)
        .read_namespaced_secret("unrelated", NS)
        .metadata.resource_version
    )
    events = _watch_events(
        api_client, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=1
    )
    marks = [r for t, _, r in events if t == "BOOKMARK"]
    assert marks and all(t == "BOOKMARK" for t, _, _ in events) and marks[-1] == latest
    # without the flag, no bookmarks
    assert _watch_events(api_client, resource_version=rv, timeout_seconds=1) == []


def test_compaction_answers_410_inside_the_stream(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    v1 = client.CoreV1Api(api_client)
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    v1.create_namespaced_pod(NS, pod("p"))
    kube_fake.state.compact()
    with pytest.raises(ApiException) as e:
        _watch_events(api_client, resource_version=rv, timeout_seconds=2)
    assert e.value.status == 410 and "Expired" in str(e.value.reason)
    # the raw stream: HTTP 200, then one ERROR event holding a 410 Status
    resp = urllib3.request(
        "GET", f"{kube_fake.url}/api/v1/namespaces/{NS}/pods?watch=true&resourceVersion={rv}"
    )
    lines = [json.loads(line) for line in resp.data.splitlines()]
    assert resp.status == 200 and len(lines) == 1 and lines[0]["type"] == "ERROR"
    assert lines[0]["object"]["code"] == 410 and lines[0]["object"]["kind"] == "Status"
    # a current resourceVersion still works
    now_rv = v1.list_namespaced_pod(NS).metadata.resource_version
    assert _watch_events(api_client, resource_version=now_rv, timeout_seconds=1) == []


def test_compaction_as_http_410(api_client: client.ApiClient, kube_fake: FakeKubeAPIServer) -> None:
    v1 = client.CoreV1Api(api_client)
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    v1.create_namespaced_pod(NS, pod("p"))
    kube_fake.state.compact()
    kube_fake.state.faults.expired_as_http = True
    with pytest.raises(ApiException) as e:
        v1.list_namespaced_pod(NS, watch=True, resource_version=rv, timeout_seconds=1)
    assert e.value.status == 410


def test_compact_now_expires_open_watches(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    v1 = client.CoreV1Api(api_client)
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    errors: list[int] = []

    def run() -> None:
        try:
            _watch_events(api_client, resource_version=rv, timeout_seconds=10)
        except ApiException as e:
            errors.append(e.status)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(0.3)
    kube_fake.state.compact(expire_watches=True)
    t.join(5)
    assert not t.is_alive() and errors == [410]


def test_dropped_watch_raises_protocol_error(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    v1 = client.CoreV1Api(api_client)
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    for i in range(5):
        v1.create_namespaced_pod(NS, pod(f"p{i}"))
    kube_fake.drop_next_watches(1, after_events=2)
    got = []
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for ev in watch.Watch().stream(
            v1.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=5
        ):
            got.append(ev["object"].metadata.name)
    assert got == ["p0", "p1"]
    # the next watch (past the drop count) resumes from the last one seen
    last = v1.read_namespaced_pod("p1", NS).metadata.resource_version
    assert [
        n for _, n, _ in _watch_events(api_client, resource_version=last, timeout_seconds=1)
    ] == ["p2", "p3", "p4"]


def test_stalled_watch_times_out_on_the_client(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    v1 = client.CoreV1Api(api_client)
    rv = v1.list_namespaced_pod(NS).metadata.resource_version
    kube_fake.state.faults.stall.set()
    v1.create_namespaced_pod(NS, pod("p"))
    start = time.monotonic()
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        for _ in watch.Watch().stream(v1.list_namespaced_pod, NS, resource_version=rv,
                                      timeout_seconds=30, _request_timeout=(2, 0.5)):  # fmt: skip
            pass
    assert time.monotonic() - start < 5
    kube_fake.state.faults.stall.clear()
    assert [n for _, n, _ in _watch_events(api_client, resource_version=rv, timeout_seconds=1)] == [
        "p"
    ]


def test_pod_logs_and_follow(api_client: client.ApiClient, kube_fake: FakeKubeAPIServer) -> None:
    v1 = client.CoreV1Api(api_client)
    v1.create_namespaced_pod(NS, pod("p"))
    kube_fake.state.append_log(NS, "p", "line 1\nline 2\n", container="main")
    assert v1.read_namespaced_pod_log("p", NS) == "line 1\nline 2\n"
    assert v1.read_namespaced_pod_log("p", NS, tail_lines=1) == "line 2\n"
    got: list[str] = []
    resp = v1.read_namespaced_pod_log("p", NS, follow=True, _preload_content=False)

    def read() -> None:
        for chunk in resp.stream(64):
            got.append(chunk.decode())

    t = threading.Thread(target=read)
    t.start()
    time.sleep(0.2)
    kube_fake.state.append_log(NS, "p", "line 3\n", container="main")
    kube_fake.set_pod_phase(NS, "p", "Succeeded")  # the container exited: followers end
    t.join(5)
    assert not t.is_alive() and "".join(got) == "line 1\nline 2\nline 3\n"
    with pytest.raises(ApiException) as e:
        v1.read_namespaced_pod_log("nope", NS)
    assert e.value.status == 404


def test_foreground_delete_waits_for_dependents(
    api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    batch, v1 = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    job = batch.create_namespaced_job(NS, {
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                                       "containers": [{"name": "c", "image": "i"}]}}},
    })  # fmt: skip
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job.metadata.uid,
              "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
    for i in range(2):  # pods the kubelet still holds (it must stop their processes first)
        v1.create_namespaced_pod(
            NS, pod(f"j-{i}", ownerReferences=owner, finalizers=[KUBELET_FINALIZER])
        )
    batch.delete_namespaced_job("j", NS, propagation_policy="Foreground")
    terminating = batch.read_namespaced_job("j", NS)
    assert terminating.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in terminating.metadata.finalizers
    assert all(p.metadata.deletion_timestamp for p in v1.list_namespaced_pod(NS).items)
    kube_fake.release_pod(NS, "j-0")
    assert batch.read_namespaced_job("j", NS).metadata.deletion_timestamp  # one dependent left
    kube_fake.release_pod(NS, "j-1")
    with pytest.raises(ApiException) as e:
        batch.read_namespaced_job("j", NS)
    assert e.value.status == 404 and v1.list_namespaced_pod(NS).items == []


def test_background_delete_removes_owner_and_dependents(api_client: client.ApiClient) -> None:
    batch, v1 = client.BatchV1Api(api_client), client.CoreV1Api(api_client)
    job = batch.create_namespaced_job(NS, {"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "i"}]}}}})  # fmt: skip
    owner = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": job.metadata.uid}]
    v1.create_namespaced_pod(NS, pod("j-0", ownerReferences=owner))
    batch.delete_namespaced_job("j", NS, propagation_policy="Background")
    assert v1.list_namespaced_pod(NS).items == []
    with pytest.raises(ApiException):
        batch.read_namespaced_job("j", NS)


def test_status_changes_only_through_the_status_subresource(api_client: client.ApiClient) -> None:
    v1 = client.CoreV1Api(api_client)
    v1.create_namespaced_pod(NS, pod("p"))
    v1.patch_namespaced_pod(
        "p", NS, {"status": {"phase": "Running"}, "metadata": {"labels": {"a": "b"}}}
    )
    got = v1.read_namespaced_pod("p", NS)
    assert got.status.phase == "Pending" and got.metadata.labels == {"a": "b"}
    v1.patch_namespaced_pod_status(
        "p", NS, {"status": {"phase": "Running"}, "metadata": {"labels": {}}}
    )
    got = v1.read_namespaced_pod("p", NS)
    assert got.status.phase == "Running" and got.metadata.labels == {"a": "b"}
