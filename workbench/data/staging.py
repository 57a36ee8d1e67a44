"""What a local job gets for its mounts, and the outputs it sends back.

Where a mount's DST lands on the local backend (documented in docs/data.md):

- relative DST (``data``, ``./ckpt``): ``WORKING_DIR/DST``, as on a cluster, where it
  resolves against the container's working directory. Data appears there as a symlink to
  the job's staged copy (or to the local source itself); an output is a plain folder.
- absolute DST (``/data``): processes cannot mount without privileges, so the data lives in
  ``JOB_DIR/mounts/data`` and the job's env maps one to the other (``WORKBENCH_MOUNTS``,
  JSON). ``workbench.data.path("/data/x")`` returns the real path locally and ``/data/x``
  unchanged on a cluster, so one script runs on both.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import fcntl
import functools
import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import MountError, SpecError
from ..journal import JobJournal
from ..settings import Settings
from ..spec import ACTIVE_STATUSES, JobEvent, JobStatus, Mount, TrainSpec
from .cache import ObjectCache, Progress, default_cache_dir
from .urls import Store, describe_error, open_store, parse_url, redact, redact_url

MOUNTS_ENV = "WORKBENCH_MOUNTS"


def path(p: str) -> str:
    """The real local path of ``p`` inside a job (identity where nothing is remapped)."""
    mounts: dict[str, str] = json.loads(os.environ.get(MOUNTS_ENV) or "{}")
    for dst in sorted(mounts, key=len, reverse=True):
        root = dst.rstrip("/") or "/"
        if p == root or p.startswith(root.rstrip("/") + "/"):
            return mounts[dst] + p[len(root.rstrip("/")) :]
    return p


def resolve_dst(dst: str, working_dir: str, job_dir: Path, field_name: str = "data") -> Path:
    """Where DST is for a local job; a relative one must stay inside the working dir."""
    if os.path.isabs(dst):
        return job_dir / "mounts" / os.path.normpath(dst).lstrip("/")
    base = Path(working_dir).resolve()
    target = base / os.path.normpath(dst)
    # The parent must resolve inside (a symlinked folder could lead elsewhere); the leaf
    # itself may be our own symlink from an earlier run.
    real_parent = target.parent.resolve()
    if target == base or not (real_parent == base or base in real_parent.parents):
        raise MountError(
            f"{field_name}: destination {dst!r} resolves to {target.parent.resolve() / target.name}, "
            f"outside the job's working directory {base} (use a path inside it, or an absolute "
            "DST such as /data)"
        )
    return target


def link_owner(link: Path, home: Path) -> str | None:
    """The job whose folder a DST symlink points into (``HOME/jobs/NAME/...``); None when
    the link is not one workbench made."""
    target = Path(os.path.normpath(link.parent.absolute() / os.readlink(link)))
    for jobs in {Path(home).absolute() / "jobs", Path(home).resolve() / "jobs"}:
        if jobs in target.parents:
            return target.relative_to(jobs).parts[0]
    return None


def _check_dst_free(target: Path, home: Path, field_name: str, dst: str,
                    active: Callable[[str], bool], me: str | None = None) -> None:  # fmt: skip
    """A relative data DST becomes our symlink: never replace the user's own files, nor a
    link a live job is reading through; a finished or deleted job's link is reclaimed."""
    if target.is_symlink():
        owner = link_owner(target, home)
        if owner is None:
            raise MountError(f"{field_name}: destination {dst!r} ({target}) is a symlink workbench "
                             "did not make; remove it or pick another DST")  # fmt: skip
        if owner != me and active(owner):
            raise MountError(f"{field_name}: destination {dst!r} ({target}) is in use by job "
                             f"{owner!r}, which has not finished; wait for it to end, cancel it, "
                             "or pick another DST")  # fmt: skip
        return
    if target.exists():
        raise MountError(f"{field_name}: destination {dst!r} ({target}) already exists in the "
                         "working directory; remove it or pick another DST")  # fmt: skip


def _in_place(target: Path, source: Path) -> bool:
    """True when DST already is the source itself (``--data ./data:data``): nothing to link."""
    return not target.is_symlink() and target.exists() and target.resolve() == source.resolve()


def store_active(store: Any) -> Callable[[str], bool]:
    """``name -> True while the job is Pending or Running`` in a JobStore."""

    def active(name: str) -> bool:
        row = store.row(name)
        return row is not None and row["status"] in ACTIVE_STATUSES

    return active


@contextlib.contextmanager
def _links_lock(home: Path) -> Iterator[None]:
    """One supervisor at a time checks and swaps DST links (two jobs staging at once)."""
    with open(Path(home) / "mounts.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _point(link: Path, to: Path) -> None:
    """Make ``link`` a symlink to ``to`` in one step (readers never see it missing)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.wb-{os.getpid()}")
    if tmp.is_symlink():
        tmp.unlink()
    tmp.symlink_to(to)
    os.replace(tmp, link)


def check_mounts(spec: TrainSpec, home: Path, settings: Settings | None = None,
                 active: Callable[[str], bool] | None = None) -> None:  # fmt: skip
    """Fail fast at submit: bad URL, unknown scheme, missing bucket, credentials, DST.

    ``active(name)`` says whether a job still runs (default: its status in the store);
    a relative DST linked into a live job's folder is refused.
    """
    if active is None:
        from ..store import JobStore

        active = store_active(JobStore(Path(home) / "jobs.db"))
    env = dict(spec.env)
    working_dir = spec.working_dir or os.getcwd()
    probe_dir = Path(home) / "jobs" / "_"
    for m in spec.data:
        field_name = f"data {redact_url(m.src)}:{m.dst}"
        url = parse_url(m.src, "data")
        target = resolve_dst(m.dst, working_dir, probe_dir, "data")
        store = open_store(url, env, settings, "data")
        if url.is_object_store:
            try:
                store.fs.info(store.path)
            except Exception as e:
                raise store.error("cannot read", e) from None
        else:
            src = Path(store.path)
            if not src.is_absolute():
                src = Path(working_dir) / src
            if not src.exists():
                raise MountError(
                    f"data: local source {m.src!r} ({src}) does not exist (check the path)"
                )
            if not os.access(src, os.R_OK):
                raise MountError(f"data: no permission to read {src}")
            if not os.path.isabs(m.dst) and not _in_place(target, src):
                _check_dst_free(target, home, field_name, m.dst, active)
            continue
        if not os.path.isabs(m.dst):
            _check_dst_free(target, home, field_name, m.dst, active)
    for m in spec.outputs:
        url = parse_url(m.src, "output")
        resolve_dst(m.dst, working_dir, probe_dir, "output")
        store = open_store(url, env, settings, "output")
        if url.is_object_store:
            bucket = store.fs._strip_protocol(store.path).lstrip("/").split("/", 1)[0]
            try:
                store.fs.ls(bucket, detail=False)
            except Exception as e:
                raise store.error("cannot write to", e) from None


class JobData:
    """Stages a job's mounts before it starts and uploads its outputs when it ends."""

    def __init__(self, spec: TrainSpec, job_dir: Path, home: Path, settings: Settings | None = None,
                 active: Callable[[str], bool] = lambda _: False) -> None:  # fmt: skip
        self.active = active  # which jobs still run: their DST links are not ours to take
        self.spec = spec
        self.job_dir = Path(job_dir)
        self.home = Path(home)
        self.settings = settings
        self.working_dir = spec.working_dir or str(self.job_dir)
        self.env: dict[str, str] = {}
        self.outputs: list[tuple[Mount, Path]] = []

    def _settings(self) -> Settings:
        if self.settings is None:
            self.settings = Settings.load()
        return self.settings

    def stage(self, report: Callable[[str], None] = lambda _: None,
              check: Callable[[], None] | None = None) -> list[str]:  # fmt: skip
        """Prefetch/bind every data mount and prepare every output folder; returns summaries."""
        mapped: dict[str, str] = {}
        summaries: list[str] = []
        cache = ObjectCache(default_cache_dir(self.home))
        for i, m in enumerate(self.spec.data):
            url = parse_url(m.src, "data")
            store = open_store(url, self.spec.env, self._settings(), "data")
            target = resolve_dst(m.dst, self.working_dir, self.job_dir, "data")
            # A relative DST links to JOB_DIR/mounts/_i, so the link says which job owns it.
            view = target if os.path.isabs(m.dst) else self.job_dir.absolute() / "mounts" / f"_{i}"
            if url.is_object_store:
                progress = functools.partial(_report_line, report, str(url))
                result = cache.prefetch(store, report=progress, check=check)
                _build_view(result.files, view, m.mode == "rw", result.single_file)
                source = view
                summaries.append(f"{url} -> {m.dst}: {result.summary()}")
            else:
                source = Path(store.path)
                if not source.is_absolute():
                    source = Path(self.working_dir) / source
                summaries.append(f"{url} -> {m.dst}: bound in place ({m.mode})")
            if os.path.isabs(m.dst):
                if not url.is_object_store:
                    mapped[m.dst] = str(source)
                else:
                    mapped[m.dst] = str(target)
            elif not _in_place(target, Path(source)):
                if view != source:  # a local source: the job's own link to it
                    _point(view, Path(source).absolute())
                with _links_lock(self.home):
                    _check_dst_free(
                        target, self.home, "data", m.dst, self.active, self.job_dir.name
                    )
                    _point(target, view)
        for m in self.spec.outputs:
            target = resolve_dst(m.dst, self.working_dir, self.job_dir, "output")
            target.mkdir(parents=True, exist_ok=True)
            if os.path.isabs(m.dst):
                mapped[m.dst] = str(target)
            self.outputs.append((m, target))
        if mapped:
            self.env[MOUNTS_ENV] = json.dumps(mapped)
        return summaries

    def upload_outputs(self, report: Callable[[str], None] = lambda _: None) -> list[str]:
        """Send every output folder to its URL; raises MountError (redacted) on failure."""
        if not self.outputs and self.spec.outputs:  # staging did not run: folders may still exist
            for m in self.spec.outputs:
                with _quiet():
                    self.outputs.append(
                        (m, resolve_dst(m.dst, self.working_dir, self.job_dir, "output"))
                    )
        done = []
        for m, local in self.outputs:
            if not local.exists():
                continue
            store = open_store(m.src, self.spec.env, self._settings(), "output")
            n, size = upload_tree(store, local, report)
            done.append(f"{n} file(s), {size / 1e6:.1f} MB from {m.dst} -> {store.url}")
        return done


class _quiet:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        return exc[0] is not None and issubclass(exc[0], (MountError, SpecError))


def _report_line(report: Callable[[str], None], where: str, progress: Progress) -> None:
    report(progress.line(where))


def _build_view(files: list[tuple[str, Path]], view: Path, writable: bool, single: bool) -> None:
    """The mount's tree: hard links to cache entries (read-only), or copies when rw."""
    if view.is_symlink() or view.is_file():
        view.unlink()
    elif view.exists():
        shutil.rmtree(view)
    for rel, entry in files:
        dest = view if single else view / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        if writable:
            shutil.copyfile(entry, dest)
            continue
        try:
            os.link(entry, dest)  # same bytes, no copy; entries are read-only
        except OSError:
            dest.symlink_to(entry)  # the cache is on another filesystem
    if not single:
        view.mkdir(parents=True, exist_ok=True)  # an empty prefix is an empty folder


def upload_tree(store: Store, local: Path, report: Callable[[str], None] = lambda _: None,
                concurrency: int = 8) -> tuple[int, int]:  # fmt: skip
    """Upload a file or every file under a folder to the store's path; (files, bytes)."""
    if local.is_file():
        pairs = [(local, store.path)]
    else:
        pairs = [(p, f"{store.path.rstrip('/')}/{p.relative_to(local).as_posix()}")
                 for p in sorted(local.rglob("*")) if p.is_file()]  # fmt: skip
    total = sum(p.stat().st_size for p, _ in pairs)
    sent = 0
    with cf.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="upload") as pool:
        futures = {pool.submit(store.fs.put_file, str(p), r): p for p, r in pairs}
        for fut in cf.as_completed(futures):
            p = futures[fut]
            try:
                fut.result()
            except Exception as e:
                why = describe_error(e, store.url)
                text = f"output: cannot upload {p} to {store.url}: {why}; the files stay in {local}"
                raise MountError(redact(text, store.secrets)) from None
            sent += p.stat().st_size
            report(f"uploading outputs to {store.url}: {sent / 1e6:.1f}/{total / 1e6:.1f} MB")
    return len(pairs), total


# ---- what a backend calls around a job ------------------------------------------------------
def stage_job(data: JobData, journal: JobJournal, check: Callable[[], None]) -> dict[str, str]:
    """Stage a Pending job's mounts (progress in its message and events); the ranks' env.

    The env (WORKBENCH_MOUNTS) is merged into every rank's. Raises MountError (redacted)
    when staging fails, and lets ``check``'s cancel through.
    """
    spec = data.spec
    if not spec.data and not spec.outputs:
        return {}
    last = [""]

    def report(line: str) -> None:
        if line != last[0]:
            last[0] = line
            journal.set_message(line)

    journal.add_event(JobEvent(time.time(), "Staging", f"staging {len(spec.data)} mount(s), "
                               f"{len(spec.outputs)} output(s)"))  # fmt: skip
    for line in data.stage(report, check):
        journal.add_event(JobEvent(time.time(), "Staged", line))
    journal.set_message("")
    return dict(data.env)


def upload_job_outputs(
    data: JobData | None, journal: JobJournal, status: JobStatus, message: str, reason: str,
    level: str,
) -> tuple[JobStatus, str, str, str]:  # fmt: skip
    """Upload a finishing job's outputs (any end: success, failure, cancel) before its status.

    ``data`` is None when the job ended before staging began. A failed upload turns a
    success into a failure saying where the files stay.
    """
    if data is None or not data.spec.outputs:
        return status, message, reason, level
    try:
        journal.set_message("uploading outputs")
        for line in data.upload_outputs(journal.set_message):
            journal.add_event(JobEvent(time.time(), "OutputsUploaded", line))
    except Exception as e:  # never lose the job's end: record why, keep the files
        text = str(e) if isinstance(e, MountError) else f"output upload failed: {type(e).__name__}"
        journal.add_event(JobEvent(time.time(), "OutputUploadFailed", text, "error"))
        if status is JobStatus.SUCCEEDED:
            return JobStatus.FAILED, text, "OutputUploadFailed", "error"
        return status, f"{message}; {text}" if message else text, reason, level
    return status, message, reason, level
