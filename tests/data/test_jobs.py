"""End to end: real local jobs read s3:// data and write outputs that land in the bucket."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from pathlib import Path

import pytest

from workbench.errors import MountError
from workbench.spec import Mount, TrainSpec

JOB = """
import hashlib, os, pathlib, sys, time
from workbench.data import path
absolute = pathlib.Path(path("/data"))          # absolute DST: mapped locally, identity on a cluster
relative = pathlib.Path("inputs")               # relative DST: the working dir, like a container
names = sorted(p.name for p in absolute.iterdir())
assert names == sorted(p.name for p in relative.iterdir()), names
digest = hashlib.sha256(b"".join((absolute / n).read_bytes() for n in names)).hexdigest()
pathlib.Path("ckpt").mkdir(exist_ok=True)
pathlib.Path("ckpt/model.txt").write_text(digest)
pathlib.Path(path("/outputs")).joinpath("metrics.json").write_text('{"n": %d}' % len(names))
print("read", len(names), "files", flush=True)
if len(sys.argv) > 1:
    time.sleep(120)
"""


def _spec(tmp_path: Path, bucket: str, *args: str) -> TrainSpec:
    (tmp_path / "job.py").write_text(JOB)
    return TrainSpec(
        command=["python", "job.py", *args], working_dir=str(tmp_path),
        data=[Mount(f"s3://{bucket}/train", "/data"), Mount(f"s3://{bucket}/train", "inputs")],
        outputs=[Mount(f"s3://{bucket}/run1", "ckpt", "rw"), Mount(f"s3://{bucket}/run1/extra", "/outputs", "rw")],
    )  # fmt: skip


def _put_training_set(s3, bucket: str) -> bytes:  # type: ignore[no-untyped-def]
    blobs = [f"sample {i}\n".encode() * 50 for i in range(4)]
    for i, b in enumerate(blobs):
        s3.put_object(Bucket=bucket, Key=f"train/s{i}.txt", Body=b)
    return b"".join(blobs)


def _body(s3, bucket: str, key: str) -> bytes:  # type: ignore[no-untyped-def]
    return s3.get_object(Bucket=bucket, Key=key)["Body"].read()


def test_job_reads_data_and_uploads_outputs(manager, s3, bucket: str, tmp_path: Path) -> None:
    data = _put_training_set(s3, bucket)
    record = manager.submit(_spec(tmp_path, bucket))
    record = manager.wait(record.name, timeout=90)
    assert record.status.value == "Succeeded", (record.message, [e.message for e in record.events])
    assert _body(s3, bucket, "run1/model.txt").decode() == hashlib.sha256(data).hexdigest()
    assert json.loads(_body(s3, bucket, "run1/extra/metrics.json")) == {"n": 4}
    staged = [e.message for e in record.events if e.reason == "Staged"]
    assert any("fetched 4" in m for m in staged), staged
    assert any(e.reason == "OutputsUploaded" for e in record.events)

    # A second job on the same data copies nothing.
    again = manager.wait(manager.submit(_spec(tmp_path, bucket)).name, timeout=90)
    assert again.status.value == "Succeeded"
    staged = [e.message for e in again.events if e.reason == "Staged" and "inputs" not in e.message]
    assert staged and all("fetched 0 (0.0 MB), 4 already cached" in m for m in staged), staged


def test_outputs_upload_on_cancel(manager, s3, bucket: str, tmp_path: Path) -> None:
    _put_training_set(s3, bucket)
    record = manager.submit(_spec(tmp_path, bucket, "--sleep"))
    deadline = time.time() + 60
    while not (tmp_path / "ckpt" / "model.txt").exists():
        assert time.time() < deadline and not manager.get(record.name).status.terminal
        time.sleep(0.2)
    record = manager.cancel(record.name)
    assert record.status.value == "Cancelled"
    assert (
        len(_body(s3, bucket, "run1/model.txt")) == 64
    )  # written before the cancel, uploaded on it


def test_failed_staging_fails_job_with_reason(manager, s3, bucket: str, tmp_path: Path) -> None:
    spec = TrainSpec(command=["python", "-c", "pass"], working_dir=str(tmp_path),
                     data=[Mount(f"s3://{bucket}/train", "/data")])  # fmt: skip
    s3.put_object(Bucket=bucket, Key="train/a.txt", Body=b"a")
    record = manager.submit(spec)
    s3.delete_object(Bucket=bucket, Key="train/a.txt")
    s3.delete_bucket(Bucket=bucket)  # gone between submit and staging
    record = manager.wait(record.name, timeout=60)
    assert record.status.value == "Failed" and bucket in record.message
    assert any(e.reason == "MountFailed" for e in record.events)


def test_credentials_never_leak(manager, moto_endpoint: str, s3, bucket: str, tmp_path: Path,
                                monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """Keys from the config file: nothing under WORKBENCH_HOME, no log, record or error has them."""
    secret = f"sekrit-{uuid.uuid4().hex}"
    key_id = f"AKID{uuid.uuid4().hex[:12].upper()}"
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    config = Path(__import__("os").environ["WORKBENCH_CONFIG"])
    config.write_text(
        f"storage:\n  s3:\n    endpoint_url: {moto_endpoint}\n    key: {key_id}\n    secret: {secret}\n"
    )
    from workbench.manager import JobManager
    from workbench.settings import Settings

    m = JobManager(Settings.load())
    _put_training_set(s3, bucket)
    spec = _spec(tmp_path, bucket)
    spec.env = {"EXTRA_SECRET_TOKEN": secret}  # a credential-looking env var, kept apart
    record = m.wait(m.submit(spec).name, timeout=90)
    assert record.status.value == "Succeeded", record.message
    errors = []
    for bad in (f"s3://no-bucket-{uuid.uuid4().hex[:6]}/x:/data", "zork://b/x:/data"):
        with pytest.raises(MountError) as e:
            m.submit(
                TrainSpec(
                    command=["python", "-c", "pass"],
                    working_dir=str(tmp_path),
                    data=[Mount.parse(bad)],
                )
            )
        errors.append(str(e.value) + repr(e.value))
    texts = [json.dumps(record.to_dict()), *errors]
    home = Path(__import__("os").environ["WORKBENCH_HOME"])
    for f in home.rglob("*"):
        if f.is_file() and f.name != "secret-env.json":  # the 0600 credential file, by design
            texts.append(f.read_bytes().decode("latin-1"))
    secret_file = next(home.rglob("secret-env.json"))
    assert secret_file.stat().st_mode & 0o077 == 0
    for text in texts:
        assert secret not in text and key_id not in text
    assert "***" in json.dumps(record.to_dict())  # the masked env value
