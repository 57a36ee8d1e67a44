"""Credentials written into an object-store URL (``s3://KEY:SECRET@bucket``) are used, and masked.

s3fs takes ``KEY:SECRET@bucket`` for a bucket name; workbench turns the userinfo into the
store's key/secret, so the URL works, while every record and message shows ``s3://***@``.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from workbench.data.staging import check_mounts
from workbench.errors import MountError
from workbench.spec import Mount, TrainSpec


def test_job_reads_s3_with_credentials_in_the_url(manager, s3, bucket: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """No AWS keys anywhere but the URL: the job still reads its data."""
    s3.put_object(Bucket=bucket, Key="train/a.txt", Body=b"alpha")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # without the URL's: no keys
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    secret = f"sk/{uuid.uuid4().hex}"  # a raw '/' as in real AWS secrets
    (tmp_path / "job.py").write_text("import pathlib; print(pathlib.Path('inp/a.txt').read_text())")
    spec = TrainSpec(command=["python", "job.py"], working_dir=str(tmp_path),
                     data=[Mount(f"s3://AKIDURL:{secret}@{bucket}/train", "inp")])  # fmt: skip
    record = manager.wait(manager.submit(spec).name, timeout=90)
    assert record.status.value == "Succeeded", (record.message, [e.message for e in record.events])
    assert list(manager.logs(record.name)) == ["alpha"]
    assert record.spec["data"] == [f"s3://***@{bucket}/train:inp:ro"]
    assert secret not in json.dumps(record.to_dict()) and "AKIDURL" not in json.dumps(
        record.to_dict()
    )


def test_wrong_url_credentials_are_reported_masked(moto_with_auth: dict[str, str], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """A store that checks keys refuses the URL's (it answers a HEAD with a bare 403)."""
    for k in list(os.environ):
        if k.startswith("AWS_"):
            monkeypatch.delenv(k)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_with_auth["endpoint"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    cases = [
        ("AKIDUNKNOWN1234", "not-the-secret-123"),
        (moto_with_auth["key"], moto_with_auth["secret"]),
    ]
    for key, secret in cases:
        spec = TrainSpec(command=["python", "x.py"], working_dir=str(tmp_path),
                         data=[Mount(f"s3://{key}:{secret}@locked/x", "/data")])  # fmt: skip
        with pytest.raises(MountError, match="no permission or wrong credentials") as e:
            check_mounts(spec, tmp_path / "home", active=lambda _: False)
        assert secret not in str(e.value) and "s3://***@locked/x" in str(e.value)
