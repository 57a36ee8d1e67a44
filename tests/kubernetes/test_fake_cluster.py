"""Rendered Indexed Jobs run end to end on the fake cluster: the controller makes the
pods, the kubelet runs them as local processes with the env Kubernetes would give them."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.fakes.kube_apiserver import FakeKubeAPIServer
from tests.fakes.kube_kubelet import FakeCluster, expand, wait_until
from workbench.backends.kubernetes.manifests import ClusterOptions, RenderedJob, render
from workbench.catalog import load_catalog
from workbench.spec import TrainSpec

NS = "team-a"
TOKEN = "tok-secret-value-123"
PRINT_ENV = (
    "import json, os; keys = ['RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'PET_NODE_RANK', 'PET_NNODES', "
    "'WORKBENCH_RANK', 'WORKBENCH_JOB_NAME', 'JOB_COMPLETION_INDEX', 'HF_TOKEN']; "
    "print(json.dumps({k: os.environ.get(k) for k in keys})); import sys; print(sys.argv[1:])"
)


@pytest.fixture
def cluster(kube_fake: FakeKubeAPIServer, tmp_path: Path) -> Iterator[FakeCluster]:
    c = FakeCluster(kube_fake, tmp_path, grace=2).start()
    yield c
    c.stop()


def submit(api: client.ApiClient, job: RenderedJob) -> None:
    """What the backend will do: the Secret, then every manifest."""
    v1, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    if job.secret:
        v1.create_namespaced_secret(NS, job.secret)
    for obj in job.manifests:
        if obj["kind"] == "Service":
            v1.create_namespaced_service(NS, obj)
        elif obj["kind"] == "Job":
            batch.create_namespaced_job(NS, obj)
        else:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "kubeflow.org", "v1", NS, "pytorchjobs", obj
            )


def make(
    command: list[str], workers: int = 2, port: int = 23456, flavor: str = "indexed", **extra: Any
) -> RenderedJob:
    spec = TrainSpec.from_dict({"name": "demo", "command": command, "image": "pytorch",
                                "workers": workers, "env": {"HF_TOKEN": TOKEN}, **extra})  # fmt: skip
    catalog = load_catalog()
    spec.validate(catalog)
    options = ClusterOptions(namespace=NS, master_wait_seconds=20, master_port=port)
    return render(
        spec, catalog.spec(spec.instance_spec or ""), spec.image_ref(catalog), options, flavor
    )


def job_condition(api: client.ApiClient, flavor: str = "indexed") -> str | None:
    """The Job's Complete/Failed, or the PyTorchJob's Succeeded/Failed condition."""
    if flavor == "kubeflow":
        custom = client.CustomObjectsApi(api)
        obj = custom.get_namespaced_custom_object("kubeflow.org", "v1", NS, "pytorchjobs", "demo")
        done = [c["type"] for c in (obj.get("status") or {}).get("conditions") or []
                if c["type"] in ("Succeeded", "Failed")]  # fmt: skip
        return done[-1] if done else None
    job = client.BatchV1Api(api).read_namespaced_job("demo", NS)
    conditions = (job.status.conditions if job.status else None) or []
    return conditions[0].type if conditions else None


def pod_logs(api: client.ApiClient) -> dict[int, str]:
    """Rank -> log of each pod that succeeded (rank from the completion index or replica)."""
    v1 = client.CoreV1Api(api)
    out = {}
    for p in v1.list_namespaced_pod(NS, label_selector="workbench.io/job=demo").items:
        if p.status.phase != "Succeeded":
            continue
        labels = p.metadata.labels
        if "training.kubeflow.org/replica-type" in labels:
            rank = int(labels["training.kubeflow.org/replica-index"])
            rank += labels["training.kubeflow.org/replica-type"] == "worker"
        else:
            rank = int(p.metadata.annotations["batch.kubernetes.io/job-completion-index"])
        container = p.spec.containers[0].name
        out[rank] = v1.read_namespaced_pod_log(p.metadata.name, NS, container=container)
    return out


def test_expand_follows_kubernetes_rules() -> None:
    assert expand("$(A)-$$(A)-$(B)-$$$(A)", {"A": "x"}) == "x-$(A)-$(B)-$x"


@pytest.mark.parametrize("flavor", ["indexed", "kubeflow"])
def test_job_runs_with_the_contract_env(
    api_client: client.ApiClient, cluster: FakeCluster, flavor: str
) -> None:
    submit(api_client, make(["python", "-c", PRINT_ENV, "--price=$(cost)"], flavor=flavor))
    wait_until(lambda: job_condition(api_client, flavor) is not None, timeout=60)
    assert job_condition(api_client, flavor) == ("Complete" if flavor == "indexed" else "Succeeded")
    # a PyTorchJob succeeds with its Master: its worker may still be finishing
    wait_until(lambda: len(pod_logs(api_client)) == 2, timeout=30)
    logs = pod_logs(api_client)
    assert sorted(logs) == [0, 1]
    for rank, text in logs.items():
        env_line, argv_line = text.splitlines()[:2]
        assert json.loads(env_line) == {
            "RANK": str(rank), "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "PET_NODE_RANK": str(rank),
            "PET_NNODES": "2", "WORKBENCH_RANK": str(rank), "WORKBENCH_JOB_NAME": "demo",
            "JOB_COMPLETION_INDEX": str(rank) if flavor == "indexed" else None, "HF_TOKEN": TOKEN,
        }  # fmt: skip
        assert argv_line == "['--price=$(cost)']"  # kept literal through $(...) expansion
    if flavor == "indexed":
        status = client.BatchV1Api(api_client).read_namespaced_job("demo", NS).status
        assert (status.succeeded, status.failed, status.completed_indexes) == (2, 0, "0-1")


def test_failed_index_is_retried_up_to_the_backoff_limit(
    api_client: client.ApiClient, cluster: FakeCluster
) -> None:
    submit(api_client, make(["python", "-c", "import sys; sys.exit(3)"], workers=1, max_retries=1))
    wait_until(lambda: job_condition(api_client) is not None, timeout=60)
    assert job_condition(api_client) == "Failed"
    pods = client.CoreV1Api(api_client).list_namespaced_pod(NS).items
    assert [p.status.phase for p in pods] == ["Failed", "Failed"]
    assert {p.status.container_statuses[0].state.terminated.exit_code for p in pods} == {3}


def test_foreground_delete_stops_every_process(
    api_client: client.ApiClient, cluster: FakeCluster
) -> None:
    submit(
        api_client, make(["python", "-c", "import time; print('up', flush=True); time.sleep(120)"])
    )
    v1 = client.CoreV1Api(api_client)
    wait_until(lambda: len(cluster.procs) == 2 and all(
        p.status.phase == "Running" for p in v1.list_namespaced_pod(NS).items), timeout=60)  # fmt: skip
    pids = [p.pid for p in cluster.procs.values()]
    assert all(psutil.pid_exists(pid) for pid in pids)
    client.BatchV1Api(api_client).delete_namespaced_job("demo", NS, propagation_policy="Foreground")
    # returns at once; the Job lingers until its pods (and their processes) are gone
    assert client.BatchV1Api(api_client).read_namespaced_job("demo", NS).metadata.deletion_timestamp

    def gone() -> bool:
        try:
            client.BatchV1Api(api_client).read_namespaced_job("demo", NS)
        except ApiException as e:
            return e.status == 404
        return False

    wait_until(gone, timeout=30)
    assert v1.list_namespaced_pod(NS).items == []
    assert not [
        pid
        for pid in pids
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    ]


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["indexed", "kubeflow"])
def test_two_worker_torch_ddp_job_completes(
    api_client: client.ApiClient, cluster: FakeCluster, flavor: str
) -> None:
    """A real 2-rank torch DDP run (gloo) forms its world from the rendered env alone."""
    with socket.socket() as s:  # a free loopback port for this test's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = ["python", "-m", "workbench.examples.train_ddp", "--epochs", "1", "--steps", "5"]
    submit(api_client, make(command, port=port, flavor=flavor))
    wait_until(lambda: job_condition(api_client, flavor) is not None, timeout=120)
    assert job_condition(api_client, flavor) in ("Complete", "Succeeded"), pod_logs(api_client)
    wait_until(lambda: len(pod_logs(api_client)) == 2, timeout=30)  # a worker may lag its master
    logs = pod_logs(api_client)
    done = {
        i: [line for line in text.splitlines() if line.startswith(f"rank {i} done")]
        for i, text in logs.items()
    }
    assert sorted(done) == [0, 1] and all(len(v) == 1 for v in done.values()), logs
    digests = {v[0].split(" params ")[1] for v in done.values()}
    assert len(digests) == 1 and all(" world 2 " in v[0] for v in done.values())


def test_pods_starting_at_once_get_one_tf_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kubelet starts each pod in a thread of its own: every pod's TF_CONFIG must name
    the same loopback port for a host, or the chief listens where the worker does not dial
    (the TFJob flake: 'failed to connect to all addresses'). Ports are handed out slowly
    here, so that the pods' threads overlap."""
    import threading
    import time

    from tests.fakes import kube_tfjob

    handed = iter(range(20000, 21000))

    def slow_free_ports(n: int) -> list[int]:
        time.sleep(0.05)
        return [next(handed) for _ in range(n)]

    monkeypatch.setattr(kube_tfjob, "free_ports", slow_free_ports)
    value = json.dumps({"cluster": {"chief": ["j-chief-0.ns.svc:2222"],
                                    "worker": ["j-worker-0.ns.svc:2222"]},
                        "task": {"type": "worker", "index": 0}})  # fmt: skip
    names, ports, seen = {"j-chief-0.ns.svc", "j-worker-0.ns.svc"}, {}, []  # type: ignore[var-annotated]
    threads = [threading.Thread(target=lambda: seen.append(
        json.loads(kube_tfjob.loopback_tf_config(value, names, ports))["cluster"]))
        for _ in range(4)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4 and all(c == seen[0] for c in seen), seen
    assert seen[0]["chief"][0].startswith("127.0.0.1:")
