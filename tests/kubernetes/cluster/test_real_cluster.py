"""Opt-in: the backend's paths against a real cluster (kind, k3d, minikube, a cloud one).

Skipped unless WORKBENCH_CLUSTER_TESTS=1 and KUBECONFIG names a cluster that answers; this
project's own machines have none, so `make test` skips them (docs/kubernetes.md says how to
run them on kind or k3d). Jobs run in WORKBENCH_CLUSTER_NAMESPACE (default: default), with
a public image (WORKBENCH_CLUSTER_IMAGE, default docker.io/library/python:3.12-slim).

    WORKBENCH_CLUSTER_TESTS=1 KUBECONFIG=~/.kube/config pytest -m cluster tests/kubernetes/cluster
"""

from __future__ import annotations

import functools
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes import config as kube_config

from workbench.manager import JobManager
from workbench.settings import Settings
from workbench.spec import JobStatus, TrainSpec

NS = os.environ.get("WORKBENCH_CLUSTER_NAMESPACE", "default")
IMAGE = os.environ.get("WORKBENCH_CLUSTER_IMAGE", "docker.io/library/python:3.12-slim")


@functools.cache
def skip_reason() -> str | None:
    """Why these tests cannot run here (None: a cluster answers at KUBECONFIG)."""
    if os.environ.get("WORKBENCH_CLUSTER_TESTS") != "1":
        return "opt-in: set WORKBENCH_CLUSTER_TESTS=1 and KUBECONFIG to a real cluster"
    path = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    if not path or not Path(path).expanduser().is_file():
        return "KUBECONFIG names no kubeconfig file"
    try:
        api = kube_config.new_client_from_config(str(Path(path).expanduser()))
        client.VersionApi(api).get_code(_request_timeout=5, _preload_content=False)
    except Exception as e:  # any failure to reach it means: not here
        return f"the cluster at KUBECONFIG did not answer ({type(e).__name__})"
    return None


pytestmark = [pytest.mark.cluster,
              pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]  # fmt: skip


@pytest.fixture
def live(wb_home: Path) -> Iterator[JobManager]:
    """A manager whose default backend is the real cluster (Indexed Jobs); cleans up."""
    m = JobManager(Settings.load(backend="kubernetes",
                                 kubernetes={"namespace": NS, "flavor": "indexed"}))  # fmt: skip
    yield m
    for record in m.list():
        if not record.status.terminal:
            m.cancel(record.name, wait=120)
        m.delete(record.name)
    m.backend("kubernetes").close()  # type: ignore[attr-defined]


def tiny(name: str, code: str, workers: int = 1) -> TrainSpec:
    """A job running ``python -c code`` in the public image."""
    return TrainSpec.from_dict({"name": name, "image": IMAGE, "workers": workers,
                                "command": ["python", "-c", code]})  # fmt: skip


def test_a_tiny_job_runs_logs_and_is_cancelled(live: JobManager) -> None:
    suffix = uuid.uuid4().hex[:6]
    hello = f"wb-hello-{suffix}"
    code = "import os; print('hello from rank', os.environ['WORKBENCH_RANK'], flush=True)"
    live.submit(tiny(hello, code, workers=2))
    done = live.wait(hello, timeout=600)
    assert done.status is JobStatus.SUCCEEDED, done.message
    assert [r.state.value for r in done.ranks] == ["Succeeded", "Succeeded"]
    assert list(live.logs(hello, rank=1)) == ["hello from rank 1"]
    assert sorted(live.logs(hello, rank=None)) == ["[rank 0] hello from rank 0",
                                                   "[rank 1] hello from rank 1"]  # fmt: skip
    sleeper = f"wb-sleep-{suffix}"
    live.submit(tiny(sleeper, "import time; print('up', flush=True); time.sleep(3600)"))
    deadline = time.monotonic() + 600
    while live.get(sleeper).status is not JobStatus.RUNNING:
        assert time.monotonic() < deadline, live.get(sleeper).events
        time.sleep(1)
    t0 = time.monotonic()
    assert live.cancel(sleeper, wait=0).status in (JobStatus.CANCELLING, JobStatus.CANCELLED)
    assert time.monotonic() - t0 < 5  # cancel returns at once
    assert live.wait(sleeper, timeout=300).status is JobStatus.CANCELLED
    batch = client.BatchV1Api(kube_config.new_client_from_config())
    with pytest.raises(client.ApiException) as e:
        batch.read_namespaced_job(sleeper, NS)
    assert e.value.status == 404


def _dry_run(api: client.ApiClient, obj: dict[str, Any]) -> None:
    """Create ``obj`` with dryRun=All: the API server validates and admits, stores nothing."""
    kind = obj["kind"]
    if kind == "Secret":
        client.CoreV1Api(api).create_namespaced_secret(NS, obj, dry_run="All")
    elif kind == "Service":  # the namespace's shared one: there already once a job ran
        try:
            client.CoreV1Api(api).create_namespaced_service(NS, obj, dry_run="All")
        except client.ApiException as e:
            if e.status != 409:
                raise
    elif kind == "Job":
        client.BatchV1Api(api).create_namespaced_job(NS, obj, dry_run="All")
    else:
        group, version = obj["apiVersion"].split("/")
        client.CustomObjectsApi(api).create_namespaced_custom_object(
            group, version, NS, kind.lower() + "s", obj, dry_run="All")  # fmt: skip


@pytest.mark.parametrize("flavor", ["indexed", "kubeflow"])
def test_manifests_pass_a_server_side_dry_run(wb_home: Path, flavor: str) -> None:
    api = kube_config.new_client_from_config()
    groups = {g.name for g in client.ApisApi(api).get_api_versions().groups or []}
    if flavor == "kubeflow" and "kubeflow.org" not in groups:
        pytest.skip("the cluster does not serve kubeflow.org (no training-operator)")
    m = JobManager(Settings.load(backend="kubernetes",
                                 kubernetes={"namespace": NS, "flavor": flavor}))  # fmt: skip
    spec = TrainSpec.from_dict({"name": f"wb-dry-{uuid.uuid4().hex[:6]}", "image": IMAGE,
                                "workers": 2, "command": ["python", "-c", "pass"],
                                "env": {"API_TOKEN": "dry-run-only"}})  # fmt: skip
    plan = m.admit(spec)
    for obj in plan.manifests:
        _dry_run(api, obj)  # an ApiException (422, 400) fails the test with the server's words
    assert m.list() == []
