"""Data on the cluster, end to end against the fake cluster and a real S3 server (moto):
object-store outputs uploaded from pods when the command ends (any exit code), and
``preprocess(..., cluster=KubeDaskCluster(...))`` running its Dask scheduler and workers
as a job."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

from tests.data.conftest import bucket, moto_endpoint, s3  # noqa: F401 - fixtures
from tests.fakes.kube_kubelet import FakeCluster
from tests.kubernetes.test_backend import cluster, jobs, kube_env  # noqa: F401 - fixtures
from workbench.manager import JobManager
from workbench.spec import JobStatus, TrainSpec

# Rank 0 writes a checkpoint, rank 1 its own file, each into the output mount's folder; the
# fake kubelet mounts no volumes, so that folder is a host path below the working dir.
WRITER = textwrap.dedent("""
    import os, sys
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    rank = os.environ["WORKBENCH_RANK"]
    assert not any(k.startswith("WORKBENCH_UPLOAD_") for k in os.environ), "leaked"
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ, "the training saw the output's key"
    name = "model.pt" if rank == "0" else f"rank{rank}.txt"
    with open(os.path.join(out, name), "wb") as f:
        f.write(f"weights of rank {rank}".encode())
    print(f"rank {rank} wrote {name}", flush=True)
    sys.exit(int(sys.argv[2]))
""")


def _spec(name: str, workers: int, code: int, url: str, work: Path, endpoint: str) -> TrainSpec:
    return TrainSpec.from_dict({
        "name": name, "image": "pytorch:2.13-cpu", "workers": workers,
        "command": ["python", "-c", WRITER, str(work / "ckpt"), str(code)],
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
