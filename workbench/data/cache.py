"""A content-addressed cache of object-store data, filled in parallel, resumable, incremental.

An entry's name is the SHA-256 of (store, path, ETag, size, mtime): a changed object gets a
new entry, an unchanged one is never fetched twice. Bytes land in ``NAME.partial`` (large
objects in ranged parts, each recorded in ``NAME.parts`` only after it is on disk); the
entry becomes ``NAME`` by one rename after every byte is synced, so a kill or a full disk
never leaves a half-file that looks complete. A per-entry ``flock`` on the partial file
lets two jobs prefetch the same data at once without writing the same file twice.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import fcntl
import hashlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import MountError
from .urls import Store

Reporter = Callable[["Progress"], None] | None
Check = Callable[[], None] | None
PART_SIZE = 64 * 1024 * 1024  # ranged GETs of one large object, fetched side by side
CONCURRENCY = 8  # requests in flight; more only added GIL contention in bench_prefetch


@dataclass(frozen=True)
class RemoteObject:
    """One object to fetch: where it is, where it goes in the mount, and its identity."""

    path: str
    rel: str
    size: int
    etag: str
    mtime: str

    def digest(self, namespace: str) -> str:
        """The cache key: changes whenever the object's ETag, size or mtime does."""
        ident = "\0".join((namespace, self.path, self.etag, str(self.size), self.mtime))
        return hashlib.sha256(ident.encode()).hexdigest()


@dataclass
class PrefetchResult:
    """What a prefetch did: every file's cache entry, and what it had to copy."""

    files: list[tuple[str, Path]] = field(default_factory=list)  # (relative path, entry)
    fetched: int = 0
    fetched_bytes: int = 0
    hits: int = 0
    hit_bytes: int = 0
    single_file: bool = False

    @property
    def total_bytes(self) -> int:
        """Bytes in the whole mount."""
        return self.fetched_bytes + self.hit_bytes

    def summary(self) -> str:
        """One line for the job's events."""
        return (
            f"{len(self.files)} file(s), {_mb(self.total_bytes)}: fetched {self.fetched} "
            f"({_mb(self.fetched_bytes)}), {self.hits} already cached"
        )


@dataclass
class Progress:
    """Counters a reporter reads while the prefetch runs."""

    total_files: int = 0
    total_bytes: int = 0
    done_files: int = 0
    done_bytes: int = 0

    def line(self, what: str) -> str:
        """e.g. 'prefetching s3://b/x: 120/1000 files, 120.0/1000.0 MB'."""
        return (
            f"prefetching {what}: {self.done_files}/{self.total_files} files, "
            f"{self.done_bytes / 1e6:.1f}/{self.total_bytes / 1e6:.1f} MB"
        )


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def default_cache_dir(home: Path) -> Path:
    """WORKBENCH_DATA_CACHE, else HOME/cache."""
    return Path(os.environ.get("WORKBENCH_DATA_CACHE") or home / "cache")


def list_objects(store: Store) -> tuple[list[RemoteObject], bool]:
    """Every object under the store's path (or the one object it names); (objects, single)."""
    fs, root = store.fs, store.path
    try:
        fs.invalidate_cache()
        info = fs.info(root)
        if info.get("type") == "file":
            return [_remote(info, os.path.basename(root.rstrip("/")))], True
        found = fs.find(root, detail=True)
    except Exception as e:  # translated once, here, at the store's edge
        raise store.error("cannot list", e) from None
    base = fs._strip_protocol(root).rstrip("/")
    out = []
    for path, listed in sorted(found.items()):
        entry = store.followed(listed)
        if entry is None or entry["type"] != "file" or path.endswith("/"):
            continue
        rel = fs._strip_protocol(path)[len(base) :].lstrip("/")
        if rel:
            out.append(_remote(entry, rel))
    return out, False


def _remote(info: dict[str, Any], rel: str) -> RemoteObject:
    etag = str(info.get("ETag") or info.get("etag") or info.get("ukey") or "").strip('"')
    mtime = info.get("LastModified") or info.get("last_modified") or info.get("mtime") or ""
    return RemoteObject(path=info["name"], rel=rel, size=int(info.get("size") or 0), etag=etag,
                        mtime=str(mtime))  # fmt: skip


class ObjectCache:
    """Entries under ``root/AA/DIGEST``; complete entries are read-only files."""

    def __init__(
        self, root: Path, concurrency: int = CONCURRENCY, part_size: int = PART_SIZE
    ) -> None:
        self.root = Path(root)
        self.concurrency = concurrency
        self.part_size = part_size

    def entry(self, digest: str) -> Path:
        """Where the complete entry for ``digest`` lives."""
        return self.root / digest[:2] / digest

    def prefetch(
        self,
        store: Store,
        report: Callable[[Progress], None] | None = None,
        check: Callable[[], None] | None = None,
        every: float = 0.5,
    ) -> PrefetchResult:
        """Bring every object under ``store`` into the cache; copies only what is missing."""
        objects, single = list_objects(store)
        namespace = f"{store.fs.protocol}|{_endpoint(store)}"
        result = PrefetchResult(single_file=single)
        progress = Progress(total_files=len(objects), total_bytes=sum(o.size for o in objects))
        todo: list[tuple[RemoteObject, Path]] = []
        for obj in objects:
            path = self.entry(obj.digest(namespace))
            result.files.append((obj.rel, path))
            if path.exists():
                result.hits += 1
                result.hit_bytes += obj.size
                progress.done_files += 1
                progress.done_bytes += obj.size
            else:
                todo.append((obj, path))
        if report:
            report(progress)
        if todo:
            self._fetch_all(store, todo, progress, result, report, check, every)
        if report:
            report(progress)
        return result

    # ---- fetching -----------------------------------------------------------------------
    def _fetch_all(
        self, store: Store, todo: list[tuple[RemoteObject, Path]], progress: Progress,
        result: PrefetchResult, report: Reporter, check: Check, every: float,
    ) -> None:  # fmt: skip
        lock = threading.Lock()
        held: list[_Fetch] = []
        waiting: list[tuple[RemoteObject, Path]] = []
        try:
            for obj, path in todo:
                f = _Fetch.claim(obj, path, self.part_size, block=False)
                if f is None:
                    waiting.append((obj, path))  # another process is fetching it
                elif f.complete:
                    f.release()
                    self._count_hit(obj, progress, result)
                else:
                    held.append(f)
            self._run(store, held, progress, result, report, check, every, lock)
            for obj, path in waiting:  # fetched by someone else meanwhile, or take it over
                f = _Fetch.claim(obj, path, self.part_size, block=True, check=check)
                assert f is not None
                if f.complete:
                    f.release()
                    self._count_hit(obj, progress, result)
                else:
                    held.append(f)
                    self._run(store, [f], progress, result, report, check, every, lock)
        finally:
            for f in held:
                f.release()

    @staticmethod
    def _count_hit(obj: RemoteObject, progress: Progress, result: PrefetchResult) -> None:
        result.hits += 1
        result.hit_bytes += obj.size
        progress.done_files += 1
        progress.done_bytes += obj.size

    def _run(
        self, store: Store, fetches: list[_Fetch], progress: Progress, result: PrefetchResult,
        report: Reporter, check: Check, every: float, lock: threading.Lock,
    ) -> None:  # fmt: skip
        units = [(f, i) for f in fetches for i in f.missing_parts()]
        resumed_whole = [f for f in fetches if not f.missing_parts()]
        for f in fetches:
            with lock:
                progress.done_bytes += f.done_bytes()
        last = 0.0
        pool = cf.ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="prefetch")
        # A sliding window of futures: cf.wait walks every pending future on each call, so
        # submitting all of 1,000 small objects at once made waiting quadratic.
        queue = iter(units)
        pending: set[cf.Future[tuple[_Fetch, int, bool]]] = set()

        def top_up() -> None:
            for f, i in itertools.islice(queue, max(0, 2 * self.concurrency - len(pending))):
                pending.add(pool.submit(f.fetch_part, store.fs, i))

        try:
            top_up()
            for f in resumed_whole:  # an interrupted object whose parts were all there
                f.finish()
                progress.done_files += 1
                result.fetched += 1
                result.fetched_bytes += f.obj.size
            while pending:
                done, pending = cf.wait(pending, timeout=every, return_when=cf.FIRST_COMPLETED)
                for fut in done:
                    fetch, nbytes, finished = self._outcome(store, fut)
                    with lock:
                        progress.done_bytes += nbytes
                        if finished:
                            progress.done_files += 1
                            result.fetched += 1
                            result.fetched_bytes += fetch.obj.size
                top_up()
                if check:
                    check()  # may raise (a cancel): the pool stops, partials stay for a rerun
                if report and time.monotonic() - last >= every:
                    report(progress)
                    last = time.monotonic()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _outcome(
        self, store: Store, fut: cf.Future[tuple[_Fetch, int, bool]]
    ) -> tuple[_Fetch, int, bool]:
        """A part's result, its failure translated once into a MountError."""
        try:
            return fut.result()
        except OSError as e:
            if getattr(e, "errno", None) == 28:
                raise MountError(f"cache {self.root} is full (no space left on device); free space "
                                 "or point WORKBENCH_DATA_CACHE elsewhere") from None  # fmt: skip
            raise store.error("cannot fetch", e) from None
        except Exception as e:  # botocore/oss2 errors that fsspec did not wrap
            raise store.error("cannot fetch", e) from None


class _Fetch:
    """One object being fetched by this process: holds the entry's lock until released."""

    def __init__(self, obj: RemoteObject, path: Path, fd: int, part_size: int) -> None:
        self.obj = obj
        self.path = path
        self.fd = fd
        self.part_size = part_size
        self.nparts = max(1, -(-obj.size // part_size))
        self.done: set[int] = set()
        self.complete = False
        self._lock = threading.Lock()

    @property
    def partial(self) -> Path:
        """The file bytes land in."""
        return self.path.with_name(self.path.name + ".partial")

    @property
    def parts_file(self) -> Path:
        """Which ranges of the partial file are already synced (large objects only)."""
        return self.path.with_name(self.path.name + ".parts")

    @classmethod
    def claim(cls, obj: RemoteObject, path: Path, part_size: int, block: bool,
              check: Callable[[], None] | None = None) -> _Fetch | None:  # fmt: skip
        """Lock the entry's partial file; None when another process holds it (non-blocking)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path.with_name(path.name + ".partial"), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if not block:
                    return None
                if check:
                    check()
                time.sleep(0.2)
                continue
            # The holder may have renamed the partial away: our fd then names a dead inode.
            fetch = cls(obj, path, fd, part_size)
            if path.exists():
                fetch.complete = True
                return fetch
            try:
                same = os.fstat(fd).st_ino == os.stat(fetch.partial).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            fetch._resume()
            return fetch

    def _resume(self) -> None:
        if self.nparts > 1 and self.parts_file.exists():
            try:
                data = json.loads(self.parts_file.read_text())
                if (
                    data.get("digest") == self.path.name
                    and os.fstat(self.fd).st_size == self.obj.size
                ):
                    self.done = {int(i) for i in data["done"]}
            except (ValueError, KeyError, OSError):
                self.done = set()
        if not self.done:
            os.ftruncate(self.fd, 0)
            if self.nparts > 1:
                os.ftruncate(self.fd, self.obj.size)  # sparse; parts fill it in place

    def missing_parts(self) -> list[int]:
        """Parts not yet on disk."""
        return [i for i in range(self.nparts) if i not in self.done]

    def done_bytes(self) -> int:
        """Bytes already on disk from an earlier, interrupted fetch."""
        return sum(self._range(i)[1] - self._range(i)[0] for i in self.done)

    def _range(self, i: int) -> tuple[int, int]:
        start = i * self.part_size
        return start, min(self.obj.size, start + self.part_size)

    def fetch_part(self, fs: Any, i: int) -> tuple[_Fetch, int, bool]:
        """Fetch part ``i``; finishes the entry when it was the last one."""
        start, end = self._range(i)
        if self.nparts == 1:
            data = fs.cat_file(self.obj.path)
            if len(data) != self.obj.size:
                raise OSError(f"{self.obj.path}: got {len(data)} bytes, expected {self.obj.size} "
                              "(the object changed while it was fetched; run again)")  # fmt: skip
        else:
            data = read_range(fs, self.obj.path, start, end)
            if len(data) != end - start:
                raise OSError(f"{self.obj.path}: short read of part {i}")
        view = memoryview(data)
        offset = start
        while view:
            n = os.pwrite(self.fd, view, offset)
            view, offset = view[n:], offset + n
        if self.nparts > 1:
            os.fdatasync(self.fd)
            with self._lock:
                self.done.add(i)
                tmp = self.parts_file.with_name(self.parts_file.name + ".tmp")
                tmp.write_text(json.dumps({"digest": self.path.name, "done": sorted(self.done)}))
                os.replace(tmp, self.parts_file)
                last = len(self.done) == self.nparts
        else:
            self.done.add(i)
            last = True
        if last:
            self.finish()
        return self, end - start, last

    def finish(self) -> None:
        """Sync, make read-only and rename into place: from here on the entry is complete."""
        os.fdatasync(self.fd)
        os.fchmod(self.fd, 0o444)
        os.rename(self.partial, self.path)
        with contextlib.suppress(FileNotFoundError):
            self.parts_file.unlink()
        self.complete = True

    def release(self) -> None:
        """Drop the lock (an unfinished partial stays for the next run to resume)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_range(fs: Any, path: str, start: int, end: int) -> bytes:
    """Bytes ``[start, end)`` of an object."""
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    if protocol == "oss":  # ossfs hands oss2 an inclusive byte range
        data: bytes = fs.cat_file(path, start=start, end=end - 1)
    else:
        data = fs.cat_file(path, start=start, end=end)
    return data


def _endpoint(store: Store) -> str:
    opts = store.options
    return str(opts.get("endpoint") or (opts.get("client_kwargs") or {}).get("endpoint_url") or "")
