"""Copies between an object store and a folder, for processes with no workbench home: a
pod's init container fills its data volume (``python -m workbench.data prefetch URL DEST``)
and a finished job sends its outputs back (``python -m workbench.data upload SRC URL``).

Both go through the code local staging uses (``ObjectCache.prefetch``: parallel, ranged,
resumable; ``upload_tree``). Credentials come only from the environment (``AWS_*``,
``OSS_*``, which the Kubernetes backend fills from the job's Secret): never from a config
file, and never from the URL, where they would show in the pod's command line.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import MountError, SpecError
from ..redaction import userinfo_credentials
from ..settings import Settings
from .cache import ObjectCache, PrefetchResult, Progress
from .staging import upload_tree
from .urls import Store, open_store, parse_url, redact_url

CACHE_DIR = ".workbench-cache"  # inside DEST: same filesystem, so files move by rename
Report = Callable[[str], None]


@dataclass(frozen=True)
class Copied:
    """What a transfer did (for its summary line)."""

    files: int
    bytes: int
    fetched: int | None = None  # a prefetch: how many were not in the cache

    def summary(self) -> str:
        """e.g. '3 file(s), 12.0 MB (fetched 1)'."""
        text = f"{self.files} file(s), {self.bytes / 1e6:.1f} MB"
        return text if self.fetched is None else f"{text} (fetched {self.fetched})"


def _store(url: str, where: str) -> Store:
    """The store for ``url``; SpecError (on ``where``) when the URL itself is wrong."""
    if userinfo_credentials(url):
        raise SpecError(where, f"{redact_url(url)!r} holds credentials, which would show in "
                        "the process list", "pass them as AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY "
                        "(s3) or OSS_ACCESS_KEY_ID/OSS_ACCESS_KEY_SECRET (oss) in the environment")  # fmt: skip
    try:
        parsed = parse_url(url, where)
    except MountError as e:
        raise SpecError(where, str(e).removeprefix(f"{where}: ")) from None
    if not parsed.is_object_store:
        raise SpecError(where, f"{redact_url(url)!r} is not an object-store URL",
                        "give s3://BUCKET/PREFIX or oss://BUCKET/PREFIX")  # fmt: skip
    # Settings() and not Settings.load(): options come from the environment only.
    return open_store(parsed, None, Settings(), where)


def prefetch(url: str, dest: str | Path, report: Report = lambda _: None) -> Copied:
    """Copy every object under ``url`` into the folder ``dest`` (a single object lands as
    ``dest/NAME``). A copy cut short resumes where it stopped when run again: parts
    already fetched wait in ``dest/.workbench-cache`` (or ``WORKBENCH_DATA_CACHE``)."""
    store = _store(url, "url")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shared = os.environ.get("WORKBENCH_DATA_CACHE")
    root = Path(shared) if shared else dest / CACHE_DIR
    last = [0.0]

    def progress(p: Progress) -> None:
        now = time.monotonic()
        if now - last[0] >= 2.0 or p.done_files == p.total_files:
            last[0] = now
            report(store.redact(p.line(str(store.url))))

    result: PrefetchResult = ObjectCache(root).prefetch(store, report=progress)
    for rel, entry in result.files:
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if shared:  # the node's cache stays whole: link (or copy across filesystems)
            _replace_with_link(entry, target)
        else:
            os.replace(entry, target)  # this copy is the only one: move it into place
            os.chmod(target, 0o644)  # cache entries are read-only; the volume is the job's
    if not shared:
        shutil.rmtree(root, ignore_errors=True)
    return Copied(len(result.files), result.total_bytes, result.fetched)


def _replace_with_link(entry: Path, target: Path) -> None:
    if target.exists() or target.is_symlink():
        target.unlink()
    try:
        os.link(entry, target)
    except OSError:
        shutil.copyfile(entry, target)


def upload(src: str | Path, url: str, report: Report = lambda _: None) -> Copied:
    """Upload the file or folder ``src`` to ``url`` (a folder's tree under the prefix)."""
    local = Path(src)
    if not local.exists():
        raise MountError(f"output: {local} does not exist: nothing to upload to {redact_url(url)}")
    store = _store(url, "output")
    files, size = upload_tree(store, local, lambda line: report(store.redact(line)))
    return Copied(files, size)
