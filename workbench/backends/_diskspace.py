"""A full disk under a local job: name it, keep room to say so, recognise its errors."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
from pathlib import Path

# Space set aside in the job folder at start and given back on a full disk, so the
# supervisor can still write the job's end to the store (SQLite needs room for its WAL).
RESERVE_BYTES = 256 * 1024
# Below this many free bytes a failure is put down to the full disk.
LOW_SPACE_BYTES = 64 * 1024


class DiskFull(Exception):
    """The disk under the job folder (and the store) is full."""


def mount_point(path: str | Path) -> Path:
    """The mount point of the filesystem holding ``path`` (what a full disk is named by)."""
    p = Path(path).resolve()
    try:
        dev = p.stat().st_dev
        while p.parent != p and p.parent.stat().st_dev == dev:
            p = p.parent
    except OSError:
        pass
    return p


def space_left(path: str | Path) -> int | None:
    """Bytes an unprivileged writer may still use on the filesystem of ``path``."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def reserve_space(job_dir: Path) -> Path:
    """Set RESERVE_BYTES aside in ``job_dir`` (best effort: a full disk has none)."""
    path = job_dir / ".space-reserve"
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        finally:
            os.close(fd)
    return path


def low_space(path: str | Path) -> bool:
    """True when the filesystem of ``path`` has (almost) no room left."""
    left = space_left(path)
    return left is not None and left < LOW_SPACE_BYTES


def is_disk_full(e: BaseException, path: str | Path) -> bool:
    """True when ``e`` (or what caused it) says the disk is full, or it is an I/O or store
    error raised while the disk under ``path`` is full."""
    seen: BaseException | None = e
    for _ in range(10):  # causes and contexts, without looping forever on a cycle
        if seen is None:
            break
        if isinstance(seen, DiskFull):
            return True
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return True
        if getattr(seen, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
            return True
        seen = seen.__cause__ or seen.__context__
    from ..errors import BackendError

    return isinstance(e, (OSError, sqlite3.Error, BackendError)) and low_space(path)
