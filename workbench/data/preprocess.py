"""Data preparation at scale: map a function over input shards on a Dask cluster.

``preprocess(fn, inputs="s3://b/raw/*.jpg", output="s3://b/shards/")`` runs ``fn(bytes) ->
bytes`` once per input object on a LocalCluster (127.0.0.1, dashboard link shown), on the
cluster as a workbench job (``cluster=KubeDaskCluster(workers=2)``, see kube_dask.py) or a
KubeCluster from dask-kubernetes, retries failed shards, names the ones that still fail,
and writes each output whole or not at all (one PUT, or a rename on local disk).
"""

from __future__ import annotations

import os
import posixpath
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import BackendError, BackendUnavailableError, MountError
from ..settings import Settings
from .kube_dask import KubeDaskCluster
from .urls import open_store, redact

DASK_HINT = "pip install 'jupyter-gpu-workbench[dask]'"
CONNECT_TIMEOUT = 30.0  # seconds to reach a scheduler that is up
CHECK_EVERY = 2.0  # seconds between looks at a cluster job's status while shards run
SHARD_POLL = 0.05  # seconds between looks for finished shards when none were ready


@dataclass
class PreprocessResult:
    """Where each shard's output went, which shards failed (name -> why), the dashboard."""

    outputs: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    dashboard: str | None = None
    job: str | None = None  # the workbench job that ran the Dask cluster (cluster jobs)

    @property
    def ok(self) -> bool:
        """True when every shard succeeded."""
        return not self.failed

    def raise_for_failures(self) -> None:
        """MountError naming every failed shard (no-op when all succeeded)."""
        if self.failed:
            names = ", ".join(sorted(self.failed))
            raise MountError(f"preprocess: {len(self.failed)} shard(s) failed: {names}")


def _write_atomic(fs: Any, path: str, data: bytes) -> None:
    """Whole or nothing: object stores publish on a single PUT; local disk via rename."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol in ("file", "local"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = posixpath.join(posixpath.dirname(path), f".{posixpath.basename(path)}.partial")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    else:
        fs.pipe_file(path, data)


def run_shard(fn: Callable[[bytes], bytes | str], src: tuple[str, dict[str, Any], str],
              dst: tuple[str, dict[str, Any], str]) -> str:  # fmt: skip
    """One task on a Dask worker: read the input, apply ``fn``, write the output atomically."""
    import fsspec

    in_fs = fsspec.filesystem(src[0], **src[1])
    out_fs = fsspec.filesystem(dst[0], **dst[1])
    result = fn(in_fs.cat_file(src[2]))
    if isinstance(result, str):
        result = result.encode()
    if not isinstance(result, (bytes, bytearray)):
        raise TypeError(f"fn must return bytes or str, got {type(result).__name__}")
    _write_atomic(out_fs, dst[2], bytes(result))
    return dst[2]


def _client(cluster: Any) -> tuple[Any, Any, bool]:
    """(client, cluster, owned): owned ones are closed when preprocess ends."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise BackendUnavailableError(
            "dask", "preprocess needs dask.distributed", DASK_HINT
        ) from None
    if isinstance(cluster, KubeDaskCluster):
        address = cluster.start()
        try:
            client = Client(address, timeout=CONNECT_TIMEOUT)
        except BaseException as e:
            if isinstance(e, (OSError, TimeoutError)):
                cluster.check()  # a job that ended says why; one that runs is unreachable
                cluster.close(cancel=True)
                raise BackendError("kubernetes", f"cannot reach the Dask scheduler of job {cluster.job} "
                                   f"at {address}: {e}") from None  # fmt: skip
            cluster.close(cancel=True)
            raise
        try:
            cluster.wait_for_workers(client)
        except BaseException:
            _close(client, cluster, done=False)
            raise
        return client, cluster, True
    if cluster is None or cluster == "local":
        # 127.0.0.1 only; port 0 for the dashboard (None would bind a fixed 8787).
        local = LocalCluster(n_workers=min(2, os.cpu_count() or 1), threads_per_worker=1, processes=True,
                             host="127.0.0.1", dashboard_address="127.0.0.1:0")  # fmt: skip
        return Client(local), local, True
    if cluster == "kubernetes":
        try:
            from dask_kubernetes.operator import KubeCluster
        except ImportError:
            raise BackendUnavailableError("dask-kubernetes", "cluster='kubernetes' needs dask-kubernetes",
                                          "pip install dask-kubernetes") from None  # fmt: skip
        kube = KubeCluster(name="workbench-preprocess")
        return Client(kube), kube, True
    if isinstance(cluster, Client):
        return cluster, None, False
    if isinstance(cluster, str):
        return Client(cluster), None, True
    return Client(cluster), None, True


def preprocess(
    fn: Callable[[bytes], bytes | str],
    inputs: str,
    output: str,
    cluster: Any = None,
    retries: int = 2,
    suffix: str | None = None,
    progress: bool = True,
    env: Mapping[str, str] | None = None,
    settings: Settings | None = None,
) -> PreprocessResult:
    """Map ``fn`` over every object matching ``inputs``; outputs go under ``output``."""
    src = open_store(inputs, env, settings, where="inputs")
    dst = open_store(output, env, settings, where="output")
    secrets = src.secrets | dst.secrets
    try:
        paths = (
            sorted(src.fs.glob(src.path))
            if any(c in src.path for c in "*?[")
            else sorted(
                p
                for p, i in src.fs.find(src.path, detail=True).items()
                if (src.followed(i) or {}).get("type") == "file"
            )
        )
    except Exception as e:
        raise src.error("cannot list", e) from None
    if not paths:
        raise MountError(f"inputs: nothing matches {src.url}")
    in_proto = src.fs.protocol if isinstance(src.fs.protocol, str) else src.fs.protocol[0]
    out_proto = dst.fs.protocol if isinstance(dst.fs.protocol, str) else dst.fs.protocol[0]
    out_root = dst.path.rstrip("/")
    client, owned_cluster, owned = _client(cluster)
    kube = owned_cluster if isinstance(owned_cluster, KubeDaskCluster) else None
    result = PreprocessResult(dashboard=getattr(client, "dashboard_link", None))
    if kube is not None:
        result.job = kube.job
    done = False
    try:
        if progress and result.dashboard:
            print(f"Dask dashboard: {result.dashboard}", file=sys.stderr)
        names, futures = [], []
        # Keys unique to this call: Dask hands back a held result for a key it already
        # knows, so a second call with the same shard names would silently write nothing.
        run_id = uuid.uuid4().hex[:8]
        for i, p in enumerate(paths):
            name = posixpath.basename(p)
            out_name = posixpath.splitext(name)[0] + suffix if suffix else name
            names.append(name)
            futures.append(client.submit(
                run_shard, fn, (in_proto, src.options, p), (out_proto, dst.options, f"{out_root}/{out_name}"),
                key=f"preprocess-{run_id}-{i}-{name}", retries=retries, pure=False,
            ))  # fmt: skip
        by_future = dict(zip(futures, names, strict=True))
        _wait(client, futures, progress, kube.check if kube is not None else None)
        if kube is not None and any(f.status == "cancelled" for f in futures):
            kube.lost()  # the client lost its scheduler: the job's end says why
        for fut, name in by_future.items():
            if fut.status == "finished":
                result.outputs[name] = _url(out_proto, fut.result())
            else:
                exc = fut.exception()
                result.failed[name] = redact(f"{type(exc).__name__}: {exc}", secrets)
        done = True
    finally:
        if owned:
            _close(client, owned_cluster, done)
    return result


def _close(client: Any, cluster: Any, done: bool) -> None:
    """Close what preprocess started: a cluster job ends Succeeded once the work is done,
    and is cancelled when it is not (an error, an interrupt)."""
    if isinstance(cluster, KubeDaskCluster):
        try:
            if done:
                cluster.finish(client)
            else:
                cluster.close(cancel=True)
        finally:
            client.close(timeout=CONNECT_TIMEOUT)
        return
    client.close()
    if cluster is not None:
        cluster.close()


def _url(protocol: str, path: str) -> str:
    return path if protocol in ("file", "local") else f"{protocol}://{path.lstrip('/')}"


def _wait(client: Any, futures: list[Any], progress: bool,
          check: Callable[[], Any] | None = None) -> None:  # fmt: skip
    """Wait for every shard (errors included), with a progress bar when asked; ``check``
    runs every CHECK_EVERY seconds (a cluster job's: it raises once the job has ended)."""
    from distributed import as_completed

    bar = None
    if progress:
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(futures), desc="preprocess", unit="shard")
        except ImportError:  # progress is a nicety; the work goes on without it
            bar = None
    failed = 0
    done = as_completed(futures)  # O(shards) in all; cancelled futures come out too
    checked = time.monotonic()
    try:
        while not done.is_empty():
            batch = done.next_batch(block=False)
            for fut in batch:
                failed += fut.status == "error"
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(failed=failed)
            if check is not None and time.monotonic() - checked >= CHECK_EVERY:
                checked = time.monotonic()
                check()
            if not batch:
                time.sleep(SHARD_POLL)
    finally:
        if bar is not None:
            bar.close()
