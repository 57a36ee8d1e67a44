"""Prefetch throughput vs s3fs `get`, and warm-cache reads vs plain local disk.

    .venv/bin/python bench/bench_prefetch.py [--small 1000] [--small-mb 1] [--big-mb 500]

Runs moto's S3 server on 127.0.0.1 in this process (so server and client share the CPUs,
as they would not in production), fills a bucket, then in the same run times:
1. s3fs `fs.get(prefix, dir, recursive=True)` (its own async concurrency) vs
   ObjectCache.prefetch into an empty cache, for N small objects and one big object;
2. reading every file of the staged job view (hard links into the cache) vs reading the
   same files from the folder s3fs wrote. Ratios > 1 mean workbench is faster.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def _read_all(root: Path) -> int:
    total = 0
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with open(p, "rb") as f:
                while chunk := f.read(8 * 1024 * 1024):
                    total += len(chunk)
    return total


def _best(fn, repeat: int = 3) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    """Run the benchmark and print a markdown table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--small", type=int, default=1000)
    ap.add_argument("--small-mb", type=float, default=1.0)
    ap.add_argument("--big-mb", type=int, default=500)
    args = ap.parse_args()

    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    from workbench.data.cache import ObjectCache
    from workbench.data.staging import _build_view
    from workbench.data.urls import open_store
    from workbench.settings import Settings

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{server.get_host_and_port()[1]}"
    os.environ.update(AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_ENDPOINT_URL=endpoint,
                      AWS_DEFAULT_REGION="us-east-1")  # fmt: skip
    s3 = boto3.client("s3", endpoint_url=endpoint)
    s3.create_bucket(Bucket="bench")
    small = os.urandom(int(args.small_mb * 1024 * 1024))
    t = time.perf_counter()
    for i in range(args.small):
        s3.put_object(Bucket="bench", Key=f"small/f{i:05d}.bin", Body=small)
    big = os.urandom(args.big_mb * 1024 * 1024)
    s3.upload_fileobj(__import__("io").BytesIO(big), "bench", "big/one.bin")
    del big
    print(f"# filled bucket in {time.perf_counter() - t:.1f}s", file=sys.stderr)

    work = Path(tempfile.mkdtemp(prefix="bench-prefetch-"))
    rows = []
    try:
        for label, prefix, nbytes in (
            (f"{args.small} x {args.small_mb:g} MB", "small", args.small * len(small)),
            (f"1 x {args.big_mb} MB", "big", args.big_mb * 1024 * 1024),
        ):
            fs = s3fs.S3FileSystem(
                client_kwargs={"endpoint_url": endpoint}, skip_instance_cache=True
            )
            plain = work / f"plain-{prefix}"
            t = time.perf_counter()
            fs.get(f"bench/{prefix}/", str(plain) + "/", recursive=True)
            base = time.perf_counter() - t
            cache = ObjectCache(work / f"cache-{prefix}")
            store = open_store(f"s3://bench/{prefix}", settings=Settings())
            t = time.perf_counter()
            result = cache.prefetch(store)
            ours = time.perf_counter() - t
            assert result.fetched_bytes == nbytes, (result.fetched_bytes, nbytes)
            t = time.perf_counter()
            again = cache.prefetch(open_store(f"s3://bench/{prefix}", settings=Settings()))
            hit = time.perf_counter() - t
            assert again.fetched == 0
            view = work / f"view-{prefix}"
            _build_view(again.files, view, writable=False, single=False)
            disk = _best(lambda p=plain: _read_all(p))
            warm = _best(lambda v=view: _read_all(v))
            mb = nbytes / 1e6
            rows.append(
                (label, mb / base, mb / ours, base / ours, hit, mb / disk, mb / warm, disk / warm)
            )
            shutil.rmtree(plain)
            shutil.rmtree(view)
            shutil.rmtree(work / f"cache-{prefix}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()
    print(
        "| data | s3fs get MB/s | prefetch MB/s | ratio | 2nd prefetch (all cached) s "
        "| local disk read MB/s | warm-cache read MB/s | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r[0]} | {r[1]:.0f} | {r[2]:.0f} | {r[3]:.2f}x | {r[4]:.2f} | {r[5]:.0f} | {r[6]:.0f} | {r[7]:.2f}x |"
        )


if __name__ == "__main__":
    main()
