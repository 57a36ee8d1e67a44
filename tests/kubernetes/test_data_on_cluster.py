"""Data on the cluster, end to end against the fake cluster and a real S3 server (moto):
object-store outputs uploaded from pods when the command ends (any exit code), and
``preprocess(..., cluster=KubeDaskCluster(...))`` running its Dask scheduler and workers
as a job."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster

from tests.conftest import wait_for
from tests.data.conftest import bucket, moto_endpoint, s3  # noqa: F401 - fixtures
from tests.fakes.kube_kubelet import FakeCluster
from tests.kubernetes.test_backend import cluster, jobs, kube_env  # noqa: F401 - fixtures
from tests.kubernetes.test_manifests import validate
from workbench.backends import load_backend
from workbench.data import KubeDaskCluster, preprocess
from workbench.errors import BackendError
from workbench.manager import JobManager
from workbench.settings import Settings
from workbench.spec import JobStatus, TrainSpec

# Rank 0 writes a checkpoint, rank 1 its own file, each into the output mount's folder; the
# fake kubelet mounts no volumes, so that folder is a host path below the working dir. A
# shell script (cheaper than a Python start) that fails if it sees the output's credentials.
WRITER = """
set -e
env | grep -q -e '^WORKBENCH_UPLOAD_' -e '^AWS_SECRET_ACCESS_KEY=' && { echo leaked; exit 9; }
mkdir -p "$0"
if [ "$WORKBENCH_RANK" = 0 ]; then name=model.pt; else name="rank$WORKBENCH_RANK.txt"; fi
printf 'weights of rank %s' "$WORKBENCH_RANK" > "$0/$name"
echo "rank $WORKBENCH_RANK wrote $name"
exit "$1"
"""


def _spec(name: str, workers: int, code: int, url: str, work: Path, endpoint: str) -> TrainSpec:
    return TrainSpec.from_dict({
        "name": name, "image": "pytorch:2.13-cpu", "workers": workers,
        "command": ["sh", "-c", WRITER, str(work / "ckpt"), str(code)],
        "outputs": [f"{url}:ckpt"], "working_dir": str(work),
        "env": {"AWS_ENDPOINT_URL": endpoint, "AWS_DEFAULT_REGION": "us-east-1"},
    })  # fmt: skip


def test_outputs_are_uploaded_at_every_end(jobs: JobManager, cluster: FakeCluster, s3,  # noqa: F811
                                           bucket: str, moto_endpoint: str,  # noqa: F811
                                           tmp_path: Path) -> None:  # fmt: skip
    """A 2-rank job's checkpoint lands in the bucket; a failing job's partial output is
    uploaded too and its exit code kept; an upload that fails fails the pod, saying so."""
    creds = "testing:testing-secret@"  # through the job's Secret, never a literal env value
    for name in ("good", "bad", "lost"):
        (tmp_path / name).mkdir()
    specs = {
        "good": _spec("out-good", 2, 0, f"s3://{creds}{bucket}/good", tmp_path / "good", moto_endpoint),
        "bad": _spec("out-bad", 1, 3, f"s3://{creds}{bucket}/bad", tmp_path / "bad", moto_endpoint),
        "lost": _spec("out-lost", 1, 0, f"s3://{creds}no-such-bucket-x/c", tmp_path / "lost",
                      moto_endpoint),
    }  # fmt: skip
    for spec in specs.values():
        plan = jobs.admit(spec)
        assert all("testing-secret" not in str(m) for m in plan.manifests)
        jobs.launch(plan)
    done = {k: jobs.wait(s.name or "", timeout=120) for k, s in specs.items()}
    logs = {k: "\n".join(jobs.logs(s.name or "", rank=None)) for k, s in specs.items()}

    assert done["good"].status is JobStatus.SUCCEEDED, logs["good"]
    objects = s3.list_objects_v2(Bucket=bucket, Prefix="good/")["Contents"]
    assert sorted(o["Key"] for o in objects) == ["good/model.pt", "good/rank1.txt"]
    body = s3.get_object(Bucket=bucket, Key="good/model.pt")["Body"].read()
    assert body == b"weights of rank 0"
    assert "uploading outputs" in logs["good"]
    assert re.search(r"\[rank 1\] upload \d file\(s\)", logs["good"]), logs["good"]

    assert done["bad"].status is JobStatus.FAILED, logs["bad"]
    assert [r.exit_code for r in done["bad"].ranks] == [3]  # the training's own code
    body = s3.get_object(Bucket=bucket, Key="bad/model.pt")["Body"].read()
    assert body == b"weights of rank 0"  # written before it failed, uploaded anyway

    assert done["lost"].status is JobStatus.FAILED, logs["lost"]
    assert [r.exit_code for r in done["lost"].ranks] == [1]
    assert "output upload failed" in logs["lost"] and "no-such-bucket-x" in logs["lost"]
    for text in logs.values():
        assert "testing-secret" not in text


# ---- preprocess(..., cluster=KubeDaskCluster(...)) ------------------------------------------
@pytest.fixture
def cluster_dns(cluster: FakeCluster, monkeypatch: pytest.MonkeyPatch) -> FakeCluster:  # noqa: F811
    """This process (the Dask client, as a notebook pod would) resolves the names the fake
    cluster publishes, as its pods' nslookup does: they are all loopback here."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host in cluster.dns_names:
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return cluster


def _dask_cluster(workers: int, endpoint: str, flavor: str) -> KubeDaskCluster:
    with socket.socket() as s:  # the master port: the scheduler listens there
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = Settings.load(backend="kubernetes", kubernetes={"master_port": port})
    return KubeDaskCluster(workers=workers, image="pytorch:2.13-cpu", settings=settings,
                           env={"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "testing",
                                "AWS_SECRET_ACCESS_KEY": "testing-secret"},
                           backend_options={"flavor": flavor}, start_timeout=90, idle_timeout=60)  # fmt: skip


def test_the_dask_job_gets_the_mounts_and_secrets_training_gets(
    wb_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """KubeDaskCluster's job is an ordinary job of the backend: a strictly valid Indexed Job
    of workers + 1 ranks running the dask_job module, its data prefetched by the same init
    container, its credentials only in the Secret."""
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.setenv("HOME", str(tmp_path))
    kube = KubeDaskCluster(workers=3, data=["s3://bucket-a/raw:/data"], name="prep-1",
                           env={"AWS_SECRET_ACCESS_KEY": "s3cr3t-value-9", "AWS_ENDPOINT_URL": "http://s3.local"},
                           backend_options={"flavor": "indexed"}, threads=2)  # fmt: skip
    plan = load_backend("kubernetes", settings=Settings.load()).admit(kube.spec())
    assert [m["kind"] for m in plan.manifests] == ["Secret", "Service", "Job"]
    for obj in plan.manifests[1:]:
        validate(obj)
    job = plan.manifests[2]
    assert job["spec"]["completions"] == 4
    pod = job["spec"]["template"]["spec"]
    main = pod["containers"][0]
    assert main["command"][:3] == ["python", "-m", "workbench.data.dask_job"]
    assert main["command"][3:5] == ["--threads", "2"]
    env = {e["name"]: e for e in main["env"]}
    assert env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "prep-1-credentials"
    assert env["MASTER_ADDR"]["value"].startswith("prep-1-0.")
    assert [c["name"] for c in pod["initContainers"]] == ["wait-for-master", "prefetch-data-0"]
    assert "s3cr3t-value-9" not in json.dumps(plan.to_dict())


def test_preprocess_on_the_cluster_matches_a_local_cluster(
    kube_env: Path, cluster_dns: FakeCluster, s3, bucket: str, moto_endpoint: str,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """Rank 0 the scheduler, ranks 1-2 workers that found it through MASTER_ADDR; the same
    outputs as a LocalCluster's, a progress bar, and the job Succeeded once done."""
    for i in range(8):
        s3.put_object(Bucket=bucket, Key=f"raw/s{i}.txt", Body=f"shard {i}\n".encode())

    def shout(data: bytes) -> bytes:  # a local function: Dask ships it by value
        return data.upper() + b"!"

    kube = _dask_cluster(2, moto_endpoint, "indexed")
    result = preprocess(shout, inputs=f"s3://{bucket}/raw/*.txt", output=f"s3://{bucket}/kube/",
                        cluster=kube)  # fmt: skip
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address="127.0.0.1:0") as local_cluster, Client(local_cluster) as c:  # fmt: skip
        local = preprocess(shout, inputs=f"s3://{bucket}/raw/*.txt",
                           output=f"s3://{bucket}/local/", cluster=c, progress=False)  # fmt: skip
    assert result.ok and local.ok and len(result.outputs) == 8
    kube_out, local_out = ({o["Key"].split("/", 1)[1]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
                            for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"{p}/")["Contents"]}
                           for p in ("kube", "local"))  # fmt: skip
    assert kube_out == local_out and kube_out["s3.txt"] == b"SHARD 3\n!"
    assert "preprocess: 100%" in capsys.readouterr().err
    backend = kube._backend()
    record = backend.get(result.job)
    assert record.status is JobStatus.SUCCEEDED and record.workers == 3
    logs = "\n".join(backend.logs(result.job, None))
    assert "[rank 0] workbench: the work is done" in logs, logs
    for rank in (1, 2):
        assert re.search(
            rf"\[rank {rank}\] workbench: dask worker tcp://127\.0\.0\.1:\d+ joined", logs
        )
    # The credentials went to the job's Secret: the stored spec and the manifests mask them.
    assert "testing-secret" not in json.dumps(record.to_dict())
    wait_for(lambda: not cluster_dns.procs, 10, "every rank's process to end")
    backend.close()


def test_cancelling_the_job_stops_preprocess_with_an_error(
    kube_env: Path,  # noqa: F811
    cluster_dns: FakeCluster,
    tmp_path: Path,
) -> None:
    """Cancelling the Dask job mid-work ends preprocess with an error naming the job, in
    seconds, and leaves no process behind."""
    (tmp_path / "raw").mkdir()
    (tmp_path / "raw" / "a.txt").write_bytes(b"a")
    started = tmp_path / "started"  # the fake's pods share this host's disk

    def stall(data: bytes) -> bytes:
        started.touch()
        time.sleep(120)
        return data

    kube = _dask_cluster(1, "http://127.0.0.1:9", "kubeflow")

    def cancel_when_working() -> None:
        wait_for(started.exists, 90, "the shard to start on the worker")
        kube._backend().cancel(kube.job, wait=0)

    canceller = threading.Thread(target=cancel_when_working, daemon=True)
    canceller.start()
    start = time.monotonic()
    with pytest.raises(
        BackendError,
        match=r"preprocess job preprocess-\w+ ended Cancelled before the work was done",
    ):
        preprocess(stall, inputs=str(tmp_path / "raw" / "*.txt"), output=str(tmp_path / "out"),
                   cluster=kube, progress=False)  # fmt: skip
    canceller.join(5)
    assert time.monotonic() - start < 60
    assert kube._backend().get(kube.job).status is JobStatus.CANCELLED
    wait_for(lambda: not cluster_dns.procs, 15, "every rank's process to end")
    kube._backend().close()
