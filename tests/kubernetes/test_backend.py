"""KubernetesBackend against the fake API server and fake cluster (controllers + a kubelet
running pods as local processes): the BackendContract, submit/cancel/delete, idempotent
names, scheduling events, capacity, nodes, config, the CLI and the server."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml
from kubernetes import client

from tests.backends.contract import SCRIPTS, BackendContract
from tests.conftest import wait_for
from tests.fakes.kube_apiserver import FakeKubeAPIServer
from tests.fakes.kube_kubelet import FakeCluster
from workbench.backends import load_backend
from workbench.backends.kubernetes import cluster as kcluster
from workbench.backends.kubernetes import rest
from workbench.backends.kubernetes.manifests import LABEL_JOB, RANKS_SERVICE
from workbench.errors import BackendUnavailableError, SpecError, SubmitError
from workbench.manager import JobManager
from workbench.settings import Settings
from workbench.spec import JobRecord, JobStatus, RankState, TrainSpec
from workbench.store import JobStore

NS = "team-a"
REPO = Path(__file__).resolve().parents[2]


def write_kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig whose current context is the fake server."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "u"}},
                     {"name": "other", "context": {"cluster": "fake", "user": "u"}}],
    }))  # fmt: skip
    return path


@pytest.fixture
def kube_env(kube_fake: FakeKubeAPIServer, wb_home: Path, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Path:  # fmt: skip
    """KUBECONFIG at the fake, jobs in namespace team-a."""
    path = write_kubeconfig(tmp_path / "kubeconfig", kube_fake.url)
    monkeypatch.setenv("KUBECONFIG", str(path))
    monkeypatch.setenv("WORKBENCH_K8S_NAMESPACE", NS)
    return path


@pytest.fixture
def cluster(kube_fake: FakeKubeAPIServer, tmp_path: Path) -> Iterator[FakeCluster]:
    """Two nodes of 2 GPUs each, a scheduler, the controllers and a kubelet."""
    c = FakeCluster(kube_fake, tmp_path / "cluster", grace=2,
                    nodes={"node-a": 2, "node-b": 2}).start()  # fmt: skip
    yield c
    c.stop()


def manager_for(flavor: str = "indexed") -> JobManager:
    """A JobManager whose default backend is kubernetes, flavour set in the config."""
    return JobManager(Settings.load(backend="kubernetes", kubernetes={"flavor": flavor}))


@pytest.fixture
def jobs(kube_env: Path, cluster: FakeCluster) -> Iterator[JobManager]:
    """A manager on the fake cluster (Indexed Jobs); cancels what a test leaves running."""
    m = manager_for()
    yield m
    for record in m.list(status=["Pending", "Running", "Cancelling"]):
        m.cancel(record.name, wait=15)
    m.backend("kubernetes").close()  # type: ignore[attr-defined]


def spec(command: list[str], **kw: object) -> TrainSpec:
    """A spec running ``command`` in tests/scripts."""
    return TrainSpec.from_dict({"command": command, "image": "pytorch:2.13-cpu", "workers": 2,
                                "working_dir": str(SCRIPTS), **kw})  # fmt: skip


class TestKubernetesContract(BackendContract):
    """Every contract case on the kubernetes backend, each rank a pod of an Indexed Job."""

    runtime = "pod"

    @pytest.fixture
    def jobs(self, jobs: JobManager) -> JobManager:  # type: ignore[override]
        """The module's manager on the fake cluster."""
        return jobs


class TestKubeflowContract(TestKubernetesContract):
    """The same cases with each job a PyTorchJob (the training-operator's env)."""

    @pytest.fixture
    def jobs(self, kube_env: Path, cluster: FakeCluster) -> Iterator[JobManager]:  # type: ignore[override]
        m = manager_for("kubeflow")
        yield m
        for record in m.list(status=["Pending", "Running", "Cancelling"]):
            m.cancel(record.name, wait=15)
        m.backend("kubernetes").close()  # type: ignore[attr-defined]


# ---- admit / dry run ------------------------------------------------------------------------
def test_dry_run_prints_yaml_without_a_cluster(wb_home: Path, tmp_path: Path) -> None:
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "nowhere"), "PYTHONPATH": str(REPO),
           "HOME": str(tmp_path)}  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-m", "workbench.cli", "submit", "--backend", "kubernetes", "--dry-run",
         "--name", "dry", "--workers", "2", "--gpus", "1", "--env", "HF_TOKEN=hf_sekret123",
         "--", "python", "train.py"], env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    docs = list(yaml.safe_load_all(out.stdout))
    assert [d["kind"] for d in docs] == ["Secret", "Service", "Job"]
    assert docs[0]["stringData"] == {"HF_TOKEN": "***"} and "hf_sekret123" not in out.stdout
    assert docs[2]["spec"]["completions"] == 2
    assert "nothing was checked against a cluster" in out.stdout
    assert JobManager(Settings.load()).list() == []  # the same home: nothing recorded


def test_admit_renders_and_warns_without_kubeconfig(wb_home: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config either
    m = JobManager(Settings.load(backend="kubernetes"))
    plan = m.admit(spec(["python", "x.py"], name="a1", env={"API_KEY": "k-123456"}))
    assert [x["kind"] for x in plan.manifests] == ["Secret", "Service", "Job"]
    assert "k-123456" not in json.dumps(plan.to_dict())
    assert any("nothing was checked against a cluster" in w for w in plan.warnings)
    assert m.list() == []


@pytest.mark.parametrize(("options", "field"), [
    ({"bogus": 1}, "backend_options.bogus"), ({"flavor": "slurm"}, "backend_options.flavor"),
    ({"namespace": "Team_A"}, "backend_options.namespace")])  # fmt: skip
def test_bad_backend_options_name_the_key(kube_env: Path, options: dict[str, object],
                                          field: str) -> None:  # fmt: skip
    with pytest.raises(SpecError) as e:
        manager_for().admit(spec(["python", "x.py"], name="opt", backend_options=options))
    assert e.value.field == field


def test_gang_that_can_never_fit_is_refused(jobs: JobManager) -> None:
    with pytest.raises(SpecError) as e:
        jobs.admit(spec(["python", "x.py"], name="huge", gpus=4))
    assert e.value.field == "gpus" and "the most any has is 2" in str(e.value)
    with pytest.raises(SpecError) as e:
        jobs.admit(spec(["python", "x.py"], name="wide", gpus=2, workers=3))
    assert e.value.field == "workers" and "at most 2" in str(e.value)
    assert jobs.admit(spec(["python", "x.py"], name="fits", gpus=2, workers=2)).warnings == []


def test_config_section_places_pods(kube_env: Path, cluster: FakeCluster) -> None:
    settings = Settings.load(backend="kubernetes", kubernetes={
        "flavor": "indexed", "service_account": "trainer", "image_pull_secrets": ["reg"],
        "instance_specs": {"cpu.4x": {"node_selector": {"pool": "cpu"}, "priority_class": "low",
                                         "tolerations": [{"key": "k", "operator": "Exists"}]}}})  # fmt: skip
    m = JobManager(settings)
    s = spec(["python", "x.py"], name="placed", instance_spec="cpu.4x")
    with pytest.raises(SpecError) as e:  # no node has pool=cpu: never schedulable
        m.admit(s)
    assert "no schedulable node" in str(e.value)
    settings.kubernetes["instance_specs"]["cpu.4x"]["node_selector"] = {}
    pod = JobManager(settings).admit(s).manifests[-1]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainer" and pod["imagePullSecrets"] == [{"name": "reg"}]
    assert pod["priorityClassName"] == "low" and pod["tolerations"] == [
        {"key": "k", "operator": "Exists"}
    ]
    with pytest.raises(SpecError) as e:
        JobManager(Settings.load(backend="kubernetes", kubernetes={"nmespace": "x"})).admit(s)
    assert e.value.field == "kubernetes.nmespace"


def test_missing_client_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in [m for m in sys.modules if m == "kubernetes" or m.startswith(("kubernetes.",
                "workbench.backends.kubernetes.backend", "workbench.backends.kubernetes.cluster"))]:  # fmt: skip
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(BackendUnavailableError) as e:
        load_backend("kubernetes")
    assert "pip install 'jupyter-gpu-workbench[kubernetes]'" in str(e.value)


# ---- launch / status ------------------------------------------------------------------------
def _writes(fake: FakeKubeAPIServer, since: int) -> list[str]:
    """The mutating requests the fake served after the first ``since``: 'METHOD plural'."""
    return [f"{m} {p.split('?')[0].rsplit('/', 2)[-1 if m == 'POST' else -2]}"
            for m, p in fake.state.requests[since:] if m not in ("GET",)]  # fmt: skip


def test_launch_creates_owned_objects_and_is_idempotent(
    jobs: JobManager, api_client: client.ApiClient, kube_fake: FakeKubeAPIServer
) -> None:
    s = spec(["python", "sleeper.py"], name="idem", env={"HF_TOKEN": "hf_abcdef123"})
    before = len(kube_fake.state.requests)
    first = jobs.submit(s)
    # The namespace's shared Service first (read, found missing, made: once), then the
    # Secret before the Job (pods read it), owned once the Job's uid exists: no request
    # beyond the objects but that PATCH.
    assert _writes(kube_fake, before) == ["POST services", "POST secrets", "POST jobs",
                                          "PATCH secrets"]  # fmt: skip
    assert first.status in (JobStatus.PENDING, JobStatus.RUNNING)  # the watch may be quick
    assert {k: first.details[k] for k in ("namespace", "kind", "flavor")} == {
        "namespace": NS, "kind": "Job", "flavor": "indexed"}  # fmt: skip
    job = client.BatchV1Api(api_client).read_namespaced_job("idem", NS)
    assert first.details["uid"] == job.metadata.uid
    secret = client.CoreV1Api(api_client).read_namespaced_secret("idem-credentials", NS)
    assert [r.uid for r in secret.metadata.owner_references] == [job.metadata.uid]
    assert first.details["service"] is None  # no Service of its own
    svc = client.CoreV1Api(api_client).read_namespaced_service(RANKS_SERVICE, NS)
    assert svc.metadata.owner_references is None  # shared: no job's, none deletes it
    assert job.spec.template.spec.subdomain == RANKS_SERVICE
    before = len(kube_fake.state.requests)
    jobs.submit(spec(["python", "sleeper.py"], name="plain"))
    assert [f"{m} {p.split('?')[0]}" for m, p in kube_fake.state.requests[before:]] == [
        f"POST /apis/batch/v1/namespaces/{NS}/jobs"]  # the one object, nothing else  # fmt: skip
    assert "hf_abcdef123" not in json.dumps(first.to_dict())
    again = jobs.submit(
        spec(["python", "sleeper.py"], name="idem", env={"HF_TOKEN": "hf_abcdef123"})
    )
    assert again.name == "idem" and again.created_at == first.created_at
    with pytest.raises(SpecError) as e:
        jobs.submit(spec(["python", "sleeper.py", "--other"], name="idem"))
    assert e.value.field == "name" and "another spec" in str(e.value)
    assert len(client.BatchV1Api(api_client).list_namespaced_job(NS).items) == 2


def test_the_shared_service_is_ensured_and_one_not_ours_is_refused(
    jobs: JobManager, api_client: client.ApiClient, kube_fake: FakeKubeAPIServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The namespace's shared Service: a user's own of that name, or ours changed so it
    would not name the pods, refuses the submit with the fix and leaves nothing behind;
    one deleted is made again at the next check; one a racing submit made (a 409) is
    taken as made."""
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    core.create_namespaced_service(NS, {"metadata": {"name": RANKS_SERVICE}, "spec": {
        "clusterIP": "None", "selector": {"app": "mine"}}})  # fmt: skip
    with pytest.raises(SubmitError) as e:
        jobs.submit(spec(["python", "sleeper.py"], name="refused"))
    msg = str(e.value)
    assert (
        "workbench did not make" in msg and f"kubectl delete service {RANKS_SERVICE} -n {NS}" in msg
    )
    assert jobs.store.row("refused") is None and batch.list_namespaced_job(NS).items == []
    core.delete_namespaced_service(RANKS_SERVICE, NS)

    monkeypatch.setattr(kcluster, "ENSURE_SECONDS", 0.0)  # checked at every submit
    jobs.submit(spec(["python", "sleeper.py"], name="first"))
    made = core.read_namespaced_service(RANKS_SERVICE, NS)
    assert made.metadata.labels["app.kubernetes.io/managed-by"] == "workbench"
    core.patch_namespaced_service(RANKS_SERVICE, NS, {"spec": {"selector": {LABEL_JOB: "first"}}})
    with pytest.raises(SubmitError) as e:
        jobs.submit(spec(["python", "sleeper.py"], name="changed"))
    assert "has been changed" in str(e.value) and jobs.store.row("changed") is None

    core.delete_namespaced_service(RANKS_SERVICE, NS)
    before = len(kube_fake.state.requests)
    jobs.submit(spec(["python", "sleeper.py"], name="second"))
    assert "POST services" in _writes(kube_fake, before)  # made again
    assert core.read_namespaced_service(RANKS_SERVICE, NS).metadata.uid != made.metadata.uid

    read = rest.get_json
    seen: list[str] = []

    def missing_once(api: client.ApiClient, url_path: str, *a: object, **kw: object) -> object:
        if url_path.endswith(f"/services/{RANKS_SERVICE}") and not seen:
            seen.append(url_path)  # another submit makes it between this read and our POST
            raise client.ApiException(status=404, reason="Not Found")
        return read(api, url_path, *a, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(rest, "get_json", missing_once)
    before = len(kube_fake.state.requests)
    third = jobs.submit(spec(["python", "sleeper.py"], name="third"))
    assert seen and _writes(kube_fake, before) == ["POST services", "POST jobs"]  # the 409, then on
    assert third.details["uid"] == batch.read_namespaced_job("third", NS).metadata.uid


KILLED_MID_LAUNCH = """
import json, os, signal, sys
from workbench.backends.kubernetes.cluster import Cluster
from workbench.manager import JobManager
from workbench.settings import Settings
from workbench.spec import TrainSpec

def killed_before_the_secret_is_owned(self, ns, kind, name, owner):
    os.kill(os.getpid(), signal.SIGKILL)  # the Secret and the Job exist; the row is marked

Cluster.own = killed_before_the_secret_is_owned
m = JobManager(Settings.load(backend="kubernetes", kubernetes={"flavor": "indexed"}))
m.submit(TrainSpec.from_dict(json.loads(sys.argv[1])))
"""


def _killed_mid_launch(s: TrainSpec) -> None:
    """Submit ``s`` from a process that SIGKILLs itself as launch would make the Job the
    Secret's owner."""
    killed = subprocess.run([sys.executable, "-c", KILLED_MID_LAUNCH, json.dumps(s.to_dict())],
                            cwd=REPO, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert killed.returncode == -9, killed.stderr


def test_a_launch_killed_midway_is_adopted_by_the_same_spec(
    jobs: JobManager, api_client: client.ApiClient, wb_home: Path, tmp_path: Path
) -> None:
    """kill -9 between the Job's POST and the PATCH that makes it the Secret's owner: the
    Secret and the Job stay on the cluster, and the row stays marked as launching by a
    process that is gone. The same spec submitted again from the same home clears that
    row and adopts the objects (the Secret made again with the values given now, and
    owned) instead of refusing its own job; another home with that spec is still refused."""
    _killed_mid_launch(spec(["python", "sleeper.py"], name="orphan", env={"HF_TOKEN": "hf_first"}))
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    orphan = batch.read_namespaced_job("orphan", NS)
    row = jobs.store.row("orphan")  # what the kill left: the marked row, no uid
    assert row is not None and row["details"]["launching"] and "uid" not in row["details"]
    assert core.read_namespaced_secret("orphan-credentials", NS).metadata.owner_references is None

    again = jobs.submit(spec(["python", "sleeper.py"], name="orphan",
                             env={"HF_TOKEN": "hf_second"}))  # fmt: skip
    assert again.details["uid"] == orphan.metadata.uid  # adopted, not made again
    assert "launching" not in again.details and "launcher" not in again.details
    assert [j.metadata.name for j in batch.list_namespaced_job(NS).items] == ["orphan"]
    assert [s.metadata.name for s in core.list_namespaced_service(NS).items] == [RANKS_SERVICE]
    secret = core.read_namespaced_secret("orphan-credentials", NS)
    assert [base64.b64decode(v).decode() for v in secret.data.values()] == ["hf_second"]
    assert [r.uid for r in secret.metadata.owner_references] == [orphan.metadata.uid]
    wait_for(lambda: jobs.get("orphan").status is JobStatus.RUNNING, timeout=60,
             what="the adopted job running")  # fmt: skip

    other = Settings.load(home=str(tmp_path / "another-home"), backend="kubernetes",
                          kubernetes={"flavor": "indexed"})  # fmt: skip
    with pytest.raises(SpecError) as e:
        JobManager(other).submit(spec(["python", "sleeper.py"], name="orphan"))
    assert e.value.field == "name" and "already" in str(e.value)
    assert batch.read_namespaced_job("orphan", NS).metadata.uid == orphan.metadata.uid


def test_a_launch_killed_midway_is_cleared_by_the_next_list(
    jobs: JobManager, api_client: client.ApiClient, wb_home: Path
) -> None:
    """Nobody submits the killed spec again: the next ``list`` (reconcile) sees that the
    marked row's process is gone and clears what the launch left, the row, its folder and
    the objects it made, so neither a Pending job that never runs nor objects no job
    owns stay behind; the name is free for another spec."""
    _killed_mid_launch(spec(["python", "sleeper.py"], name="halfway", env={"HF_TOKEN": "hf_x"}))
    core, batch = client.CoreV1Api(api_client), client.BatchV1Api(api_client)
    row = jobs.store.row("halfway")
    assert row is not None and Path(row["details"]["job_dir"]).is_dir()
    assert batch.read_namespaced_job("halfway", NS).metadata.deletion_timestamp is None

    assert "halfway" not in [j.name for j in jobs.list()]
    assert jobs.store.row("halfway") is None
    assert not Path(row["details"]["job_dir"]).exists()
    assert [s.metadata.name for s in core.list_namespaced_secret(NS).items] == []

    def job_gone() -> bool:
        return "halfway" not in [j.metadata.name for j in batch.list_namespaced_job(NS).items]

    wait_for(job_gone, timeout=60, what="the killed launch's Job deleted")
    other = jobs.submit(spec(["python", "sleeper.py", "--other"], name="halfway"))
    assert other.details["uid"] == batch.read_namespaced_job("halfway", NS).metadata.uid


def test_a_stalled_cluster_does_not_hold_the_store_during_launch(
    jobs: JobManager, api_client: client.ApiClient, kube_fake: FakeKubeAPIServer, wb_home: Path
) -> None:
    """Launch's requests run outside any store transaction: while the API server stalls a
    submit's POST, the job shows as Pending and every other store writer (another
    process's, with a short busy timeout) goes on; a cancel waits for the launch, then
    stops the job it made. Before, launch held SQLite's write lock across its requests."""
    gate = kube_fake.state.faults.posts_open
    gate.clear()
    done: list[object] = []
    submit = threading.Thread(target=lambda: done.append(
        jobs.submit(spec(["python", "sleeper.py"], name="stalled"))))  # fmt: skip
    try:
        submit.start()
        wait_for(lambda: jobs.store.row("stalled") is not None, timeout=20,
                 what="the name reserved while the POST stalls")  # fmt: skip
        assert jobs.get("stalled").status is JobStatus.PENDING
        writer = JobStore(wb_home / "jobs.db", timeout=0.5)
        t0 = time.monotonic()
        writer.insert(JobRecord(name="bystander", status=JobStatus.PENDING, backend="local",
                                spec={"command": ["true"]}, image=""))  # fmt: skip
        writer.delete("bystander")
        assert time.monotonic() - t0 < 0.5
        assert submit.is_alive()  # still waiting on the server
        cancelled: list[JobRecord] = []
        canceller = threading.Thread(
            target=lambda: cancelled.append(jobs.cancel("stalled", wait=0))
        )
        canceller.start()
        time.sleep(0.3)
        assert canceller.is_alive()  # the cancel waits for the workload to exist
    finally:
        gate.set()
    submit.join(30)
    canceller.join(30)
    assert done and cancelled and cancelled[0].status is JobStatus.CANCELLING
    wait_for(lambda: jobs.get("stalled").status is JobStatus.CANCELLED, timeout=60,
             what="the stalled job cancelled")  # fmt: skip
    assert "launching" not in jobs.get("stalled").details


def test_kubeconfig_token_hook_runs_once_a_second_not_per_request(
    kube_env: Path, kube_fake: FakeKubeAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader's per-request hook re-applied every setting on every request (a twentieth
    of a submit); throttled, it still runs, and still re-reads the token, once a second."""
    from kubernetes.config import kube_config

    from workbench.backends.kubernetes import cluster as kc
    from workbench.backends.kubernetes.config import load_settings

    runs: list[int] = []
    set_config = kube_config.KubeConfigLoader._set_config

    def counted(self: kube_config.KubeConfigLoader, c: client.Configuration) -> None:
        runs.append(1)
        set_config(self, c)

    monkeypatch.setattr(kube_config.KubeConfigLoader, "_set_config", counted)
    c = kc.Cluster(load_settings({}))
    try:
        c.nodes()  # loads the kubeconfig (one run) and the hook's first run
        loaded = len(runs)
        for _ in range(20):
            c.nodes()
        assert len(runs) == loaded  # was one run per request
        headers = c.api.configuration.auth_settings()["BearerToken"]
        assert headers["value"] == "Bearer not-a-secret"
        monkeypatch.setattr(kc, "REFRESH_SECONDS", 0.0)  # a second has passed, every time
        for _ in range(3):
            c.nodes()
        assert len(runs) == loaded + 3  # the refresh still runs, and stays throttled after
    finally:
        c.close()


def test_unschedulable_job_shows_the_event_and_stays_pending(
    jobs: JobManager, kube_fake: FakeKubeAPIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler's event reaches the job even when it comes before launch commits the
    job's row. That order (the flake under load: the event was dropped for want of a row)
    is forced here: launch waits, after creating the Job, until the running events watch
    has delivered the FailedScheduling event."""
    from workbench.backends.kubernetes.cluster import Cluster

    jobs.submit(spec(["python", "sleeper.py"], name="hog", gpus=2, workers=2))
    wait_for(lambda: len([r for r in jobs.get("hog").ranks if r.state is RankState.RUNNING]) == 2,
             timeout=60, what="hog running")  # fmt: skip
    (tracker,) = jobs.backend("kubernetes")._trackers.values()  # type: ignore[attr-defined]
    (events_watch,) = [w for w in tracker.watches if w._name.startswith("watch-events")]

    def scheduler_spoke() -> bool:
        found = [int(e["metadata"]["resourceVersion"])
                 for e in kube_fake.state.list(("", "v1", "events"), NS)[0]
                 if e["reason"] == "FailedScheduling"
                 and e["involvedObject"]["name"].startswith("starved-")]  # fmt: skip
        return bool(found) and int(events_watch.resource_version or 0) >= max(found)

    own = Cluster.own

    def own_after_the_event(self: Cluster, ns: str, kind: str, name: str, owner: dict) -> None:  # type: ignore[type-arg]
        if owner["metadata"]["name"] == "starved":  # the Job exists, the row still marked
            wait_for(scheduler_spoke, timeout=30, what="the event delivered before the commit")
        own(self, ns, kind, name, owner)

    monkeypatch.setattr(Cluster, "own", own_after_the_event)
    jobs.submit(spec(["python", "sleeper.py"], name="starved", gpus=1, workers=1))
    t0 = time.monotonic()
    try:
        wait_for(lambda: "FailedScheduling" in [e.reason for e in jobs.get("starved").events],
                 timeout=10, what="the scheduling event")  # fmt: skip
    except AssertionError:  # say where it stopped: on the server, or on the way to the store
        on_server = [e["reason"] for e in kube_fake.state.list(("", "v1", "events"), NS)[0]]
        trackers = jobs.backend("kubernetes")._trackers.values()  # type: ignore[attr-defined]
        stats = [(w._name, w.stats) for t in trackers for w in t.watches]
        raise AssertionError(f"events on the server: {on_server}; watches: {stats}") from None
    took = time.monotonic() - t0
    record = jobs.get("starved")
    event = next(e for e in record.events if e.reason == "FailedScheduling")
    assert event.message == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert event.level == "warning" and took < 5
    assert record.status is JobStatus.PENDING
    jobs.cancel("hog", wait=30)  # frees the GPUs: the starved job is scheduled and runs
    wait_for(
        lambda: jobs.get("starved").status is JobStatus.RUNNING, timeout=60, what="starved runs"
    )


def test_cancel_leaves_no_process_and_delete_forgets(jobs: JobManager, cluster: FakeCluster,
                                                    api_client: client.ApiClient) -> None:  # fmt: skip
    jobs.submit(spec(["python", "sleeper.py"], name="gone", env={"TOKEN": "t-0123456789"}))
    wait_for(lambda: len(cluster.procs) == 2, timeout=60, what="two pod processes")
    pids = [p.pid for p in cluster.procs.values()]
    assert jobs.cancel("gone", wait=0).status in (JobStatus.CANCELLING, JobStatus.CANCELLED)
    done = jobs.wait("gone", timeout=60)
    assert done.status is JobStatus.CANCELLED and {r.state for r in done.ranks} == {
        RankState.STOPPED
    }
    assert not [p for p in pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
    with pytest.raises(client.ApiException):
        client.BatchV1Api(api_client).read_namespaced_job("gone", NS)
    jobs.delete("gone")
    assert [r.name for r in jobs.list()] == []
    with pytest.raises(client.ApiException):
        client.CoreV1Api(api_client).read_namespaced_secret("gone-credentials", NS)


def test_get_without_a_watch_reads_once(kube_env: Path, cluster: FakeCluster) -> None:
    m = manager_for()
    m.submit(spec(["python", "fail_rank.py"], name="once", env={"FAIL_RANK": "9"}))
    m.backend("kubernetes").close()  # type: ignore[attr-defined]
    other = manager_for()  # another process: no watch; get() reads the cluster
    wait_for(lambda: other.get("once").status is JobStatus.SUCCEEDED, timeout=60, what="success")
    assert not other.backend("kubernetes")._trackers  # type: ignore[attr-defined]
    other.reconcile()  # the server's tick starts the namespace's watches for active jobs only
    assert not other.backend("kubernetes")._trackers  # type: ignore[attr-defined]


def test_nodes_and_capabilities(jobs: JobManager) -> None:
    jobs.submit(spec(["python", "sleeper.py"], name="holder", gpus=1, workers=2))
    wait_for(lambda: len([r for r in jobs.get("holder").ranks if r.state is RankState.RUNNING]) == 2,
             timeout=60, what="holder running")  # fmt: skip
    nodes = {n.name: n for n in jobs.nodes(backend="kubernetes")}
    assert sorted(nodes) == ["node-a", "node-b"]
    held = [h.to_dict() for n in nodes.values() for g in n.gpus for h in g.holders]
    assert sorted(h["rank"] for h in held) == [0, 1] and {h["job"] for h in held} == {"holder"}
    assert sum(len(n.gpus) for n in nodes.values()) == 4
    on_a = [j.to_dict() for j in nodes["node-a"].active_jobs]
    assert on_a == [{"name": "holder", "status": "Running", "gpus_total": 2.0}]  # both on node-a
    caps = jobs.backend("kubernetes").capabilities().to_dict()
    assert caps["runtimes"] == ["pod"] and caps["flavours"] == ["indexed", "kubeflow"]


@pytest.mark.slow
@pytest.mark.parametrize("flavor", ["indexed", "kubeflow"])
def test_two_worker_torch_ddp_through_the_manager(kube_env: Path, cluster: FakeCluster,
                                                  flavor: str) -> None:  # fmt: skip
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = JobManager(Settings.load(backend="kubernetes",
                                 kubernetes={"flavor": flavor, "master_port": port}))  # fmt: skip
    try:
        m.submit(TrainSpec.from_dict({
            "name": "ddp", "image": "pytorch:2.13-cpu", "workers": 2,
            "command": ["python", "-m", "workbench.examples.train_ddp", "--epochs", "1", "--steps", "5"]}))  # fmt: skip
        done = m.wait("ddp", timeout=180)
        logs = list(m.logs("ddp", rank=None))
        assert done.status is JobStatus.SUCCEEDED, logs
        finals = [x for x in logs if " done " in x]
        assert len(finals) == 2 and all(" world 2 " in x for x in finals), logs
    finally:
        m.backend("kubernetes").close()  # type: ignore[attr-defined]


# ---- surfaces -------------------------------------------------------------------------------
def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``workbench ARGS`` in a fresh process (env: this test's KUBECONFIG and home)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "workbench.cli", *args], env=env, cwd=SCRIPTS,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip


def test_cli_submit_list_get_against_the_fake(kube_env: Path, cluster: FakeCluster) -> None:
    out = cli("submit", "--backend", "kubernetes", "--name", "cli-job", "--workers", "2",
              "--env", "FAIL_RANK=9", "--", "python", str(SCRIPTS / "fail_rank.py"))  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "job cli-job submitted (kubernetes)" in out.stdout

    def status() -> str:  # each `get` is a new process: no watch, one read of the cluster
        got = cli("get", "cli-job", "-o", "json")
        assert got.returncode == 0, got.stderr
        return str(json.loads(got.stdout)["status"])

    wait_for(lambda: status() == "Succeeded", timeout=90, what="cli-job Succeeded", every=0.5)
    record = json.loads(cli("get", "cli-job", "-o", "json").stdout)
    # flavor auto (the default): the fake serves kubeflow.org/v1, so a PyTorchJob
    assert record["backend"] == "kubernetes" and record["details"]["kind"] == "PyTorchJob"
    assert [r["state"] for r in record["ranks"]] == ["Succeeded", "Succeeded"]
    listed = cli("list")
    assert listed.returncode == 0 and "cli-job" in listed.stdout and "Succeeded" in listed.stdout
    again = cli("submit", "--backend", "kubernetes", "--name", "cli-job", "--workers", "3",
                "--", "python", "fail_rank.py")  # fmt: skip
    assert (
        again.returncode == 2 and again.stderr.count("\n") == 1 and "error: name:" in again.stderr
    )


@pytest.fixture
def jp_server_config(kube_env: Path, cluster: FakeCluster) -> dict[str, object]:
    """Only the workbench extension, a fast tick; the fake cluster behind KUBECONFIG."""
    return {
        "ServerApp": {
            "jpserver_extensions": {"workbench": True, "jupyter_server_terminals": False}
        },
        "WorkbenchApp": {"job_poll_interval": 0.1, "api_threads": 8},
    }


async def test_server_runs_and_lists_the_cluster_job(jp_fetch, jp_server_config) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    from tests.server.conftest import validate_response

    spec_ = {"name": "api-job", "backend": "kubernetes", "workers": 2, "working_dir": str(SCRIPTS),
             "command": ["python", "rank_lines.py"], "env": {"LINES": "3"}}  # fmt: skip
    r = await jp_fetch("workbench", "api", "jobs", method="POST", body=json.dumps(spec_))
    assert r.code == 201
    validate_response(("workbench", "api", "jobs"), "POST", r)
    deadline = time.monotonic() + 90
    while True:  # the server's tick (reconcile) runs the namespace's watch: no get() polling
        r = await jp_fetch("workbench", "api", "jobs")
        validate_response(("workbench", "api", "jobs"), "GET", r)
        (job,) = json.loads(r.body)["jobs"]
        if job["status"] == "Succeeded" or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.2)
    assert (
        job["name"] == "api-job" and job["backend"] == "kubernetes" and job["status"] == "Succeeded"
    )
    assert job["details"]["namespace"] == NS and len(job["ranks"]) == 2
    logs = await jp_fetch("workbench", "api", "jobs", "api-job", "logs", params={"rank": 1})
    assert logs.body.decode().splitlines() == [f"rank 1 line {i}" for i in range(3)]


def test_flavor_flag_is_short_for_the_backend_option(
    wb_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "nowhere"))  # no cluster: nothing checked
    env_args = ("--backend", "kubernetes", "--dry-run", "--name", "fl", "-o", "json")
    out = cli("submit", *env_args, "--flavor", "kubeflow", "--", "python", "x.py")
    assert out.returncode == 0, out.stderr
    assert [m["kind"] for m in json.loads(out.stdout)["manifests"]] == ["PyTorchJob"]
    bad = cli("submit", *env_args, "--flavor", "slurm", "--", "python", "x.py")
    assert bad.returncode == 2 and "backend_options.flavor" in bad.stderr


def test_context_option_runs_the_job_through_that_context(jobs: JobManager) -> None:
    jobs.submit(spec(["python", "fail_rank.py"], name="ctx", env={"FAIL_RANK": "9"},
                     backend_options={"context": "other"}))  # fmt: skip
    done = jobs.wait("ctx", timeout=60)
    assert done.status is JobStatus.SUCCEEDED and done.details["context"] == "other"
    assert list(jobs.logs("ctx", rank=1)) == ["rank 1 attempt 1 started", "rank 1 finished"]
    with pytest.raises(SpecError) as e:
        jobs.admit(spec(["python", "x.py"], name="nope", backend_options={"context": "missing"}))
    assert e.value.field == "backend_options.context"


def test_job_view_follows_gang_semantics() -> None:
    from workbench.backends.kubernetes.status import job_view

    def pod(rank: int, phase: str, code: int | None = None) -> dict[str, object]:
        kind = "master" if rank == 0 else "worker"
        state = {"terminated": {"exitCode": code}} if code is not None else {"running": {}}
        return {"metadata": {"name": f"j-{kind}-{max(0, rank - 1)}", "labels": {
                    "training.kubeflow.org/replica-type": kind,
                    "training.kubeflow.org/replica-index": str(max(0, rank - 1))}},
                "spec": {"containers": [{"name": "pytorch"}], "nodeName": "n"},
                "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", "state": state}]}}  # fmt: skip

    succeeded = {"status": {"conditions": [{"type": "Succeeded", "status": "True"}]}}
    # The operator calls a PyTorchJob Succeeded with its Master; a failed Worker fails the gang.
    view = job_view(succeeded, [pod(0, "Succeeded", 0), pod(1, "Failed", 4)])
    assert (view.status, view.message) == (JobStatus.FAILED, "rank 1 exited with code 4")
    view = job_view(succeeded, [pod(0, "Succeeded", 0), pod(1, "Succeeded", 0)])
    assert view.status is JobStatus.SUCCEEDED
    assert job_view(None, [pod(0, "Running"), pod(1, "Pending")]).status is JobStatus.RUNNING
    assert job_view({}, [pod(0, "Pending")]).status is JobStatus.PENDING


def test_rerun_keeps_the_credentials(jobs: JobManager, api_client: client.ApiClient) -> None:
    import base64

    jobs.submit(spec(["python", "fail_rank.py"], name="orig", workers=1,
                     env={"FAIL_RANK": "9", "HF_TOKEN": "hf_rerun_secret_1"}))  # fmt: skip
    assert jobs.wait("orig", timeout=60).status is JobStatus.SUCCEEDED
    again = jobs.rerun("orig")
    assert again.name == "orig-r1" and again.backend == "kubernetes"
    secret = client.CoreV1Api(api_client).read_namespaced_secret("orig-r1-credentials", NS)
    assert base64.b64decode(secret.data["HF_TOKEN"]).decode() == "hf_rerun_secret_1"
    assert "hf_rerun_secret_1" not in json.dumps(jobs.get("orig-r1").to_dict())
    assert jobs.wait("orig-r1", timeout=60).status is JobStatus.SUCCEEDED
