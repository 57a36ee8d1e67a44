"""preprocess over 20 shards on a real dask LocalCluster; one shard fails and is named."""

from __future__ import annotations

from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from workbench.data import preprocess


def upper_or_fail(data: bytes) -> bytes:
    """Upper-case a shard; the shard holding 'poison' always fails."""
    if b"poison" in data:
        raise ValueError("cannot parse shard")
    return data.upper()


@pytest.mark.slow
def test_twenty_shards_one_failing(
    s3, bucket: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(20):
        body = b"poison" if i == 7 else f"shard {i}\n".encode()
        s3.put_object(Bucket=bucket, Key=f"raw/s{i:02d}.txt", Body=body)
    s3.put_object(Bucket=bucket, Key="raw/ignored.csv", Body=b"x")
    with LocalCluster(n_workers=2, processes=True, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:  # fmt: skip
        result = preprocess(upper_or_fail, inputs=f"s3://{bucket}/raw/*.txt", output=f"s3://{bucket}/shards/",
                            cluster=client, retries=1, suffix=".out")  # fmt: skip
        local = preprocess(upper_or_fail, inputs=f"s3://{bucket}/raw/s0*.txt", output=str(tmp_path / "out"),
                           cluster=client, retries=0)  # fmt: skip
    assert (
        set(result.failed) == {"s07.txt"}
        and "ValueError: cannot parse shard" in result.failed["s07.txt"]
    )
    assert len(result.outputs) == 19 and result.dashboard and "127.0.0.1" in result.dashboard
    for i in range(20):
        key = f"shards/s{i:02d}.out"
        if i == 7:
            with pytest.raises(s3.exceptions.NoSuchKey):
                s3.get_object(Bucket=bucket, Key=key)  # a failed shard leaves no output at all
        else:
            assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == f"SHARD {i}\n".encode()
    with pytest.raises(Exception, match=r"s07\.txt"):
        result.raise_for_failures()
    assert set(local.failed) == {"s07.txt"}
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        f"s0{i}.txt" for i in range(10) if i != 7
    ]
    assert (tmp_path / "out" / "s03.txt").read_bytes() == b"SHARD 3\n"
    err = capsys.readouterr().err
    assert "Dask dashboard: http://127.0.0.1:" in err and "preprocess: 100%" in err


@pytest.mark.slow
def test_default_local_cluster(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    for i in range(3):
        (tmp_path / "in" / f"{i}.txt").write_bytes(f"x{i}".encode())
    result = preprocess(upper_or_fail, inputs=str(tmp_path / "in" / "*.txt"), output=str(tmp_path / "out"),
                        progress=False)  # fmt: skip
    assert result.ok and sorted(result.outputs) == ["0.txt", "1.txt", "2.txt"]
    assert (tmp_path / "out" / "2.txt").read_bytes() == b"X2" and "127.0.0.1" in (
        result.dashboard or ""
    )


def test_the_same_shards_twice_write_both_outputs(tmp_path: Path) -> None:
    """Dask returns a held result for a key it knows: runs must not share task keys."""
    src = tmp_path / "raw"
    src.mkdir()
    for i in range(6):
        (src / f"s{i}.txt").write_text(f"shard {i}\n")
    with LocalCluster(n_workers=1, processes=True, threads_per_worker=2, host="127.0.0.1",
                      dashboard_address="127.0.0.1:0") as cluster, Client(cluster) as client:  # fmt: skip
        for out in ("first", "second"):
            done = preprocess(upper_or_fail, inputs=str(src / "*.txt"), output=str(tmp_path / out),
                              cluster=client, retries=0, progress=False)  # fmt: skip
            assert not done.failed
    for out in ("first", "second"):
        assert sorted(p.read_text() for p in (tmp_path / out).iterdir()) == [
            f"SHARD {i}\n" for i in range(6)
        ]


def test_the_package_function_survives_its_module_import() -> None:
    """``import workbench.data as wd; wd.preprocess(...)`` twice: importing the submodule
    used to replace the package's function with the module ('not callable')."""
    import importlib

    import workbench.data as wd

    importlib.import_module("workbench.data.preprocess")
    assert callable(wd.preprocess) and wd.preprocess.__module__ == "workbench.data.preprocess"
