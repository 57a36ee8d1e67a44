"""Prefetch into the content-addressed cache against real S3 (moto) and OSS (bridge) servers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workbench.data.cache import ObjectCache
from workbench.data.urls import open_store
from workbench.settings import Settings

FILES = {f"raw/part-{i}.txt": f"line {i}\n".encode() * (100 + i) for i in range(6)}


def _fill(s3, bucket: str) -> dict[str, bytes]:  # type: ignore[no-untyped-def]
    objects = dict(FILES)
    objects["raw/nested/big.bin"] = os.urandom(3 * 1024 * 1024 + 17)  # several parts
    for key, body in objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    return objects


@pytest.mark.parametrize("scheme", ["s3", "oss"])
def test_prefetch_hit_and_incremental(scheme: str, oss, bucket: str, tmp_path: Path) -> None:
    objects = _fill(oss, bucket)
    cache = ObjectCache(tmp_path / "cache", part_size=1024 * 1024)
    store = open_store(f"{scheme}://{bucket}/raw", settings=Settings())
    lines: list[str] = []
    first = cache.prefetch(store, report=lambda p: lines.append(p.line("x")))
    assert first.fetched == len(objects) and first.hits == 0
    got = {f"raw/{rel}": entry.read_bytes() for rel, entry in first.files}
    assert got == objects  # byte for byte
    assert lines[-1].startswith(f"prefetching x: {len(objects)}/{len(objects)} files")
    assert not list((tmp_path / "cache").rglob("*.partial")) and not list(
        (tmp_path / "cache").rglob("*.parts")
    )

    second = cache.prefetch(open_store(f"{scheme}://{bucket}/raw", settings=Settings()))
    assert second.fetched == 0 and second.hits == len(objects)

    time.sleep(1.1)  # a new Last-Modified second, as a real re-upload would have
    oss.put_object(Bucket=bucket, Key="raw/part-2.txt", Body=b"changed\n")
    third = cache.prefetch(open_store(f"{scheme}://{bucket}/raw", settings=Settings()))
    assert (third.fetched, third.fetched_bytes, third.hits) == (1, 8, len(objects) - 1)
    assert dict(third.files)["part-2.txt"].read_bytes() == b"changed\n"


def test_single_object(s3, bucket: str, tmp_path: Path) -> None:
    s3.put_object(Bucket=bucket, Key="one/train.csv", Body=b"a,b\n1,2\n")
    result = ObjectCache(tmp_path).prefetch(
        open_store(f"s3://{bucket}/one/train.csv", settings=Settings())
    )
    assert result.single_file and [(r, e.read_bytes()) for r, e in result.files] == [
        ("train.csv", b"a,b\n1,2\n")
    ]


KILLED_PREFETCH = textwrap.dedent(
    """
    import sys
    from workbench.data.cache import ObjectCache
    from workbench.data.urls import open_store
    from workbench.settings import Settings
    cache = ObjectCache(sys.argv[1], concurrency=1, part_size=256 * 1024)
    def report(p):
        print(p.done_bytes, flush=True)
    cache.prefetch(open_store(sys.argv[2], settings=Settings()), report=report, every=0.0)
    """
)


def test_kill_midway_leaves_nothing_complete_and_rerun_resumes(
    s3, bucket: str, tmp_path: Path
) -> None:
    big = os.urandom(24 * 1024 * 1024)
    s3.put_object(Bucket=bucket, Key="k/big.bin", Body=big)
    root = tmp_path / "cache"
    url = f"s3://{bucket}/k"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_PREFETCH, str(root), url],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        if 2 * 1024 * 1024 < int(line) < len(big) // 2:
            proc.send_signal(signal.SIGKILL)  # midway, hard: no cleanup runs
            break
    proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    assert not [p for p in root.rglob("*") if p.is_file() and "." not in p.name]  # nothing complete
    partial = next(root.rglob("*.partial"))
    assert partial.exists() and next(root.rglob("*.parts")).exists()

    cache = ObjectCache(root, part_size=256 * 1024)
    seen: list[int] = []
    result = cache.prefetch(
        open_store(url, settings=Settings()), report=lambda p: seen.append(p.done_bytes)
    )
    assert seen[0] == 0 and 0 < seen[1] < len(big)  # resumed from the parts already on disk
    assert result.fetched == 1 and dict(result.files)["big.bin"].read_bytes() == big
    assert not list(root.rglob("*.partial")) and not list(root.rglob("*.parts"))
