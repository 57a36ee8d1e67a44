"""Bad mounts fail at submit with a MountError saying what and where, credentials masked."""

from __future__ import annotations

from pathlib import Path

import pytest

from workbench.data.staging import check_mounts, path, resolve_dst
from workbench.data.urls import parse_url, redact, storage_options
from workbench.errors import MountError
from workbench.settings import Settings
from workbench.spec import Mount, TrainSpec


def _spec(tmp_path: Path, data: list[str] = (), outputs: list[Mount] = (), env=None) -> TrainSpec:  # type: ignore[assignment]
    return TrainSpec(command=["python", "x.py"], working_dir=str(tmp_path), env=dict(env or {}),
                     data=[Mount.parse(d) for d in data], outputs=list(outputs))  # fmt: skip


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("s3:/bucket/x", "malformed URL"),
        ("s3://", "no bucket"),
        ("s3://Bad_Bucket/x", "not a valid bucket name"),
        ("zork://bucket/x", "unknown scheme 'zork'"),
    ],
)
def test_malformed_and_unknown(url: str, words: str) -> None:
    with pytest.raises(MountError, match=words):
        parse_url(url)


def test_missing_bucket_names_bucket(s3, tmp_path: Path) -> None:
    with pytest.raises(MountError) as e:
        check_mounts(_spec(tmp_path, ["s3://no-such-bucket-here/train:/data"]), tmp_path)
    assert "no-such-bucket-here" in str(e.value) and "does not exist" in str(e.value)


def test_missing_output_bucket(s3, tmp_path: Path) -> None:
    out = Mount(src="s3://no-such-out-bucket/run1", dst="ckpt", mode="rw")
    with pytest.raises(MountError, match="no-such-out-bucket"):
        check_mounts(_spec(tmp_path, outputs=[out]), tmp_path)


def test_wrong_credentials_redacted(moto_with_auth: dict[str, str], tmp_path: Path) -> None:
    secret = "WRONG-secret-value-123456"
    env = {"AWS_ACCESS_KEY_ID": "AKIAWRONGWRONG", "AWS_SECRET_ACCESS_KEY": secret,
           "AWS_ENDPOINT_URL": moto_with_auth["endpoint"]}  # fmt: skip
    with pytest.raises(MountError) as e:
        check_mounts(_spec(tmp_path, ["s3://locked/x:/data"], env=env), tmp_path)
    text = str(e.value)
    assert "wrong credentials" in text and "s3://locked/x" in text
    assert secret not in text and secret not in repr(e.value.__cause__ or "")


def test_no_permission(moto_with_auth: dict[str, str], tmp_path: Path) -> None:
    env = {"AWS_ACCESS_KEY_ID": moto_with_auth["key"], "AWS_SECRET_ACCESS_KEY": moto_with_auth["secret"],
           "AWS_ENDPOINT_URL": moto_with_auth["endpoint"]}  # fmt: skip
    with pytest.raises(MountError) as e:
        check_mounts(_spec(tmp_path, ["s3://locked/x:/data"], env=env), tmp_path)
    assert "no permission" in str(e.value) and moto_with_auth["secret"] not in str(e.value)


def test_oss_wrong_key(oss, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OSS_ACCESS_KEY_ID", "not-the-key")
    with pytest.raises(MountError) as e:
        check_mounts(_spec(tmp_path, [f"oss://{bucket}/x:/data"]), tmp_path)
    assert "wrong credentials" in str(e.value) and "oss-test-secret-value" not in str(e.value)


def test_destination_outside_working_dir(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "escape").symlink_to("/tmp")
    spec = _spec(tmp_path / "work", [f"{tmp_path / 'src'}:escape/data"])
    with pytest.raises(MountError, match="outside the job's working directory"):
        check_mounts(spec, tmp_path)


def test_destination_taken_by_user_files(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "data").mkdir()
    with pytest.raises(MountError, match="already exists"):
        check_mounts(_spec(tmp_path, [f"{tmp_path / 'src'}:data"]), tmp_path)


def test_missing_local_source_and_pvc(tmp_path: Path) -> None:
    with pytest.raises(MountError, match="does not exist"):
        check_mounts(_spec(tmp_path, ["./nope:/data"]), tmp_path)
    with pytest.raises(MountError, match="cluster backend"):
        check_mounts(_spec(tmp_path, ["pvc://claim/sub:/data"]), tmp_path)


def test_nas_resolves_through_config_or_says_how(tmp_path: Path) -> None:
    export = tmp_path / "nfs"
    (export / "sets" / "a").mkdir(parents=True)
    settings = Settings(storage={"nas": {"mounts": {"filer:/export": str(export)}}})
    check_mounts(_spec(tmp_path, ["nas://filer/export/sets/a:/data"]), tmp_path, settings)
    with pytest.raises(MountError, match="not mounted on this host"):
        check_mounts(_spec(tmp_path, ["nas://other/export:/data"]), tmp_path, Settings())


def test_credentials_precedence_and_redaction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-env")
    settings = Settings(
        storage={"s3": {"key": "from-config", "secret": "cfg-secret", "endpoint_url": "http://x"}}
    )
    opts = storage_options("s3", {"AWS_ACCESS_KEY_ID": "from-job"}, settings)
    assert opts["key"] == "from-job" and opts["secret"] == "cfg-secret"
    assert opts["client_kwargs"]["endpoint_url"] == "http://x"
    assert redact("ftp://u:pw@host/x and cfg-secret", {"cfg-secret"}) == "ftp://***@host/x and ***"


def test_path_helper_maps_absolute_dst(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert path("/data/x.csv") == "/data/x.csv"  # a cluster: identity
    monkeypatch.setenv("WORKBENCH_MOUNTS", '{"/data": "/home/j/mounts/data"}')
    assert path("/data/x.csv") == "/home/j/mounts/data/x.csv"
    assert path("/data") == "/home/j/mounts/data"
    assert path("/database") == "/database"
    assert (
        resolve_dst("/data", str(tmp_path), tmp_path / "job")
        == tmp_path / "job" / "mounts" / "data"
    )
    assert resolve_dst("./d/x", str(tmp_path), tmp_path / "job") == tmp_path / "d" / "x"
