"""workbench.data.ls/du/head and `workbench data ...` against real S3 and OSS endpoints."""

from __future__ import annotations

import io

import pandas as pd
import pytest

import workbench.data as data
from workbench.cli import main
from workbench.errors import MountError


def _fill(s3, bucket: str) -> None:  # type: ignore[no-untyped-def]
    s3.put_object(
        Bucket=bucket, Key="ds/readme.txt", Body=b"".join(f"line {i}\n".encode() for i in range(50))
    )
    s3.put_object(
        Bucket=bucket,
        Key="ds/table.csv",
        Body=b"id,name\n" + b"".join(f"{i},n{i}\n".encode() for i in range(30)),
    )
    buf = io.BytesIO()
    pd.DataFrame({"x": range(100), "y": [f"v{i}" for i in range(100)]}).to_parquet(buf)
    s3.put_object(Bucket=bucket, Key="ds/sub/t.parquet", Body=buf.getvalue())


@pytest.mark.parametrize("scheme", ["s3", "oss"])
def test_ls_du_head(scheme: str, oss, bucket: str) -> None:
    _fill(oss, bucket)
    entries = data.ls(f"{scheme}://{bucket}/ds")
    assert [(e.name, e.type) for e in entries] == [
        (f"{scheme}://{bucket}/ds/readme.txt", "file"), (f"{scheme}://{bucket}/ds/sub", "directory"),
        (f"{scheme}://{bucket}/ds/table.csv", "file"),
    ]  # fmt: skip
    assert entries[0].size == 390
    usage = data.du(f"{scheme}://{bucket}/ds")
    assert usage["files"] == 3 and usage["bytes"] > 390 + 200
    assert data.head(f"{scheme}://{bucket}/ds/readme.txt", n=3) == "line 0\nline 1\nline 2"
    csv = data.head(f"{scheme}://{bucket}/ds/table.csv", n=2).splitlines()
    assert csv[0].split() == ["id", "name"] and csv[2].split() == ["1", "n1"] and len(csv) == 3
    pq = data.head(f"{scheme}://{bucket}/ds/sub/t.parquet", n=2).splitlines()
    assert pq[0] == "100 rows; columns: x: int64, y: string" or pq[0].startswith(
        "100 rows; columns: x: int64, y:"
    )
    assert pq[2].split() == ["0", "v0"] and len(pq) == 4


def test_cli_verbs(s3, bucket: str, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(s3, bucket)
    assert main(["data", "ls", f"s3://{bucket}/ds"]) == 0
    out = capsys.readouterr().out
    assert f"s3://{bucket}/ds/table.csv" in out and "3 item(s)" in out
    assert main(["data", "du", f"s3://{bucket}/ds", "-o", "json"]) == 0
    assert '"files": 3' in capsys.readouterr().out
    assert main(["data", "head", f"s3://{bucket}/ds/readme.txt", "-n", "2"]) == 0
    assert capsys.readouterr().out == "line 0\nline 1\n"
    assert main(["data", "ls", "s3://no-such-bucket-x/ds"]) == 1
    assert "no-such-bucket-x" in capsys.readouterr().err


def test_browse_errors_are_mount_errors(s3) -> None:
    with pytest.raises(MountError, match="unknown scheme"):
        data.ls("zork://b/x")
    with pytest.raises(MountError, match="does not exist"):
        data.head("s3://no-such-bucket-y/x.txt")


def test_local_links_read_as_their_targets_and_the_unreadable_are_left_out(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A local dataset of symbolic links (a Hugging Face snapshot is one) lists, sizes up
    and prefetches as its targets: fsspec's local listing calls every link "other", which
    the datasets API's schema refuses and du and the cache skipped. A broken link and a
    pipe hold nothing to train on: they are left out."""
    import os

    from workbench.data.cache import list_objects
    from workbench.data.urls import open_store

    blobs, ds = tmp_path / "blobs", tmp_path / "ds"
    (blobs / "shards").mkdir(parents=True)
    (blobs / "w").write_bytes(b"x" * 1000)
    (blobs / "shards" / "s0").write_bytes(b"y" * 10)
    ds.mkdir()
    (ds / "config.json").write_text("{}")
    (ds / "weights.bin").symlink_to(blobs / "w")
    (ds / "shards").symlink_to(blobs / "shards", target_is_directory=True)
    (ds / "broken").symlink_to(tmp_path / "nowhere")
    os.mkfifo(ds / "pipe")
    entries = data.ls(str(ds))
    assert [(e.name.rsplit("/", 1)[-1], e.type, e.size) for e in entries] == [
        ("config.json", "file", 2), ("shards", "directory", entries[1].size),
        ("weights.bin", "file", 1000)]  # fmt: skip
    assert data.du(str(ds)) == {"bytes": 1002, "files": 2}  # a linked folder is not walked
    objects, single = list_objects(open_store(str(ds)))
    assert not single and sorted(o.rel for o in objects) == ["config.json", "weights.bin"]
