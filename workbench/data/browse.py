"""Look inside a store before training on it: list, size up, preview."""

from __future__ import annotations

import io
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import MountError
from ..settings import Settings
from .urls import Store, open_store

TEXT_SUFFIXES = (".txt", ".log", ".json", ".jsonl", ".md", ".yaml", ".yml", ".py", ".tsv")
PREVIEW_BYTES = 64 * 1024


@dataclass(frozen=True)
class Entry:
    """One listed object or folder."""

    name: str
    type: str  # file | directory
    size: int
    modified: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {"name": self.name, "type": self.type, "size": self.size, "modified": self.modified}


def _store(url: str, env: Mapping[str, str] | None, settings: Settings | None) -> Store:
    return open_store(url, env, settings, where="url")


def ls(
    url: str, env: Mapping[str, str] | None = None, settings: Settings | None = None
) -> list[Entry]:
    """Objects and folders directly under ``url``, as ``scheme://bucket/...`` names."""
    store = _store(url, env, settings)
    try:
        store.fs.invalidate_cache()
        items = store.fs.ls(store.path, detail=True)
    except Exception as e:
        raise store.error("cannot list", e) from None
    prefix = url.split("://", 1)[0] + "://" if "://" in url else ""
    out = []
    for listed in items:
        it = store.followed(listed)
        if it is None:  # nothing to train on (a broken link, a pipe): not a dataset's part
            continue
        name = store.fs._strip_protocol(it["name"]).strip("/") if prefix else it["name"]
        modified = it.get("LastModified") or it.get("last_modified") or it.get("mtime") or ""
        out.append(Entry(name=prefix + name, type=it.get("type", "file"), size=int(it.get("size") or 0),
                         modified=str(modified)))  # fmt: skip
    return sorted(out, key=lambda e: e.name)


def du(
    url: str, env: Mapping[str, str] | None = None, settings: Settings | None = None
) -> dict[str, int]:
    """Total bytes and object count under ``url``."""
    store = _store(url, env, settings)
    try:
        store.fs.invalidate_cache()
        found = store.fs.find(store.path, detail=True)
        if not found and store.fs.isfile(store.path):
            found = {store.path: store.fs.info(store.path)}
    except Exception as e:
        raise store.error("cannot size up", e) from None
    files = [v for v in map(store.followed, found.values()) if v and v["type"] == "file"]
    return {"bytes": sum(int(v.get("size") or 0) for v in files), "files": len(files)}


def head(
    url: str, n: int = 10, env: Mapping[str, str] | None = None, settings: Settings | None = None
) -> str:
    """A preview: the first ``n`` rows of a CSV/Parquet file, or ``n`` lines of text."""
    store = _store(url, env, settings)
    path = store.path
    suffix = posixpath.splitext(path.lower().removesuffix(".gz"))[1]
    try:
        if suffix == ".parquet":
            return _parquet_head(store, n)
        with store.fs.open(path, "rb", compression="infer") as f:
            data = f.read(PREVIEW_BYTES)
    except MountError:
        raise
    except Exception as e:
        raise store.error("cannot preview", e) from None
    if suffix == ".csv":
        return _csv_head(data, n)
    if b"\0" in data[:4096] and suffix not in TEXT_SUFFIXES:
        return f"(binary, {store.fs.size(path)} bytes; first bytes: {data[:32].hex(' ')})"
    lines = data.decode("utf-8", "replace").splitlines()
    return "\n".join(lines[:n])


def _csv_head(data: bytes, n: int) -> str:
    try:
        import pandas as pd
    except ImportError:  # no pandas: the raw lines are a fine preview
        return "\n".join(data.decode("utf-8", "replace").splitlines()[: n + 1])
    cut = data[: data.rfind(b"\n") + 1] if b"\n" in data else data
    frame = pd.read_csv(io.BytesIO(cut), nrows=n)
    return frame.to_string(index=False)


def _parquet_head(store: Store, n: int) -> str:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MountError(
            "url: previewing Parquet needs pyarrow; install it with "
            "pip install 'jupyter-gpu-workbench[dask]'"
        ) from None
    with store.fs.open(store.path, "rb") as f:
        pf = pq.ParquetFile(f)
        rows = pf.metadata.num_rows
        batch = next(pf.iter_batches(batch_size=max(1, n)), None)
        schema = ", ".join(f"{fld.name}: {fld.type}" for fld in pf.schema_arrow)
        table = (
            batch.to_pandas().head(n).to_string(index=False) if batch is not None else "(no rows)"
        )
    return f"{rows} rows; columns: {schema}\n{table}"
