"""JobManager: the one API every surface (Python, CLI, magics, server) calls."""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._store_feed import ChangeBatch, DataVersion, read_changes
from .backends import backend_names, load_backend
from .backends.base import Backend, NodeInfo
from .catalog import Catalog, load_catalog
from .errors import BackendUnavailableError, JobNotFoundError, SpecError
from .plan import Plan
from .settings import Settings, make_private_dir
from .spec import JobRecord, JobStatus, TrainSpec
from .store import JobStore

# Seconds JobManager.wait goes without news before it reads the job through its backend
# (which notices a runner that died without writing anything).
LIVENESS = 2.0


class JobManager:
    """Owns the one job store, routes each job to its backend by the store's backend column,
    and keeps the surfaces free of backend details."""

    def __init__(self, settings: Settings | None = None, store: JobStore | None = None) -> None:
        self.settings = settings or Settings.load()
        self.catalog: Catalog = load_catalog(self.settings.catalog_file)
        if store is None:
            home = Path(self.settings.home)
            make_private_dir(home)  # 0700: jobs.db and job folders hold credentials
            store = JobStore(home / "jobs.db")
        # One store for every backend, shared by every process on this home: a job any
        # process submits to any backend is visible to all of them.
        self.store = store
        self._backends: dict[str, Backend] = {}

    def backend(self, name: str | None = None) -> Backend:
        """The backend called ``name`` (the configured default when None), created once."""
        name = name or self.settings.backend
        if name not in self._backends:
            self._backends[name] = load_backend(
                name, settings=self.settings, catalog=self.catalog, store=self.store
            )
        return self._backends[name]

    def admit(self, spec: TrainSpec) -> Plan:
        """Every check and the placement of ``spec`` on its backend, creating nothing: what
        ``submit`` would do (``--dry-run`` shows it)."""
        spec.validate(self.catalog, backends=backend_names())
        return self.backend(spec.backend).admit(spec)

    def launch(self, plan: Plan) -> JobRecord:
        """Carry out a plan from :meth:`admit`; returns the job's Pending record."""
        return self.backend(plan.backend).launch(plan)

    def submit(self, spec: TrainSpec) -> JobRecord:
        """Validate and start a job; returns its Pending record."""
        return self.launch(self.admit(spec))

    def _find(self, name: str) -> Backend:
        """The backend that runs job ``name``, from its row's backend column (no probing)."""
        backend = self.store.backend_of(name)
        if backend is None:
            raise JobNotFoundError(self.settings.backend, name)
        try:
            return self.backend(backend)
        except SpecError:  # stored by a process that had a backend this one lacks
            raise BackendUnavailableError(
                backend,
                f"job {name!r} runs on backend {backend!r}, which is not installed here",
                f"install the package that provides the {backend!r} backend",
            ) from None

    def _active_backends(self) -> builtins.list[Backend]:
        """Backends with a job still active in the store, loaded when first needed. One that
        cannot load here (its extra is not installed) is skipped: its jobs show as stored."""
        found = []
        for name in self.store.active_backends():
            try:
                found.append(self.backend(name))
            except (BackendUnavailableError, SpecError):
                continue
        return found

    def get(self, name: str) -> JobRecord:
        """The current record of job ``name`` (as stored, when its backend is not installed
        in this process: reading a job needs no backend)."""
        try:
            backend = self._find(name)
        except BackendUnavailableError:
            record = self.store.get(name)
            if record is None:
                raise
            return record
        return backend.get(name)

    def list(
        self, status: list[str] | None = None, limit: int | None = None, offset: int = 0
    ) -> list[JobRecord]:
        """Jobs of every backend, newest first."""
        return self.page(status=status, limit=limit, offset=offset)[0]

    def page(
        self,
        status: builtins.list[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        backend: str | None = None,
    ) -> tuple[builtins.list[JobRecord], int]:
        """One page of jobs of every backend (or one), newest first, and how many match in
        all: the store pages and counts across backends; nothing else is read."""
        if backend is not None and backend not in backend_names():
            raise SpecError(
                "backend",
                f"unknown backend {backend!r}",
                f"use one of {', '.join(backend_names())}",
            )
        self.reconcile()
        return (
            self.store.list(status=status, backend=backend, limit=limit, offset=offset),
            self.store.count(status, backend=backend),
        )

    def cancel(self, name: str, wait: float = 30.0) -> JobRecord:
        """Stop the job and every process of it; ``wait=0`` asks and returns at once."""
        return self._find(name).cancel(name, wait=wait)

    def reconcile(self) -> int:
        """Let every backend in use settle jobs whose runner died (e.g. a killed supervisor)."""
        return sum(b.reconcile() for b in self._active_backends())

    def delete(self, name: str) -> None:
        """Forget a finished job."""
        self._find(name).delete(name)

    def logs(
        self,
        name: str,
        rank: int | None = 0,
        follow: bool = False,
        tail: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[str]:
        """Lines of one rank's output; every rank's, each prefixed ``[rank R] ``, with None."""
        return self._find(name).logs(name, rank=rank, follow=follow, tail=tail, stop=stop)

    def log_tail(self, name: str, rank: int = 0, lines: int = 40) -> builtins.list[str]:
        """The last ``lines`` displayed lines of one rank, at a bounded cost (live views)."""
        return self._find(name).log_tail(name, rank, lines)

    def rerun(self, name: str, new_name: str | None = None) -> JobRecord:
        """Submit the exact spec and script snapshot of ``name`` again."""
        backend = self._find(name)
        spec = backend.rerun_spec(name)
        spec.name = new_name or self._rerun_name(name)
        return self.submit(spec)

    def _rerun_name(self, name: str) -> str:
        base = name[:44]
        for i in range(1, 1000):
            candidate = f"{base}-r{i}"
            try:
                self.get(candidate)
            except JobNotFoundError:
                return candidate
        return f"{base}-r{int(time.time())}"

    def last_change_id(self) -> int:
        """The newest id of the store's change feed (0 when nothing was recorded yet)."""
        return self.store.changes_after(0, 0)[0]

    def changes(self, since: int, limit: int = 1000) -> ChangeBatch:
        """Every job of every backend changed after change id ``since``, each once with its
        current record, and the names deleted; ``reset`` when ``since`` is older than what
        the feed keeps (re-list). Ask again from ``last_id`` while ``more`` is set."""
        return read_changes(self.store, since, limit)

    def watch(
        self,
        since: int,
        stop: threading.Event | None = None,
        timeout: float | None = None,
        interval: float = 0.1,
        limit: int = 1000,
    ) -> Iterator[ChangeBatch]:
        """Batches of changes after ``since`` as they happen, until ``stop`` is set or
        ``timeout`` seconds pass. Idle, it costs one ``PRAGMA data_version`` per
        ``interval``; the feed is read only when some process committed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        version = DataVersion(self.store)
        try:
            while stop is None or not stop.is_set():
                if version.changed():
                    while True:
                        batch = self.changes(since, limit)
                        since = batch.last_id
                        if batch:
                            yield batch
                        if not batch.more:
                            break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return
                pause = interval if left is None else min(interval, left)
                if stop is not None:
                    stop.wait(pause)
                else:
                    time.sleep(pause)
        finally:
            version.close()

    def wait(self, name: str, timeout: float | None = None, poll: float = 0.1) -> JobRecord:
        """Block until the job ends (or ``timeout`` seconds pass); returns the record.

        Follows the change feed (one tiny query per ``poll`` while nothing changes) rather
        than reading the job again and again. A runner that dies writes nothing, so every
        ``LIVENESS`` seconds without news the job is read once through its backend, which
        settles a job whose runner is gone (local: a dead supervisor fails it)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        since = self.last_change_id()  # before the read: a change racing it is seen below
        record = self.get(name)
        while not record.status.terminal:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            span = LIVENESS if left is None else min(LIVENESS, left)
            fresh = None
            for batch in self.watch(since, timeout=span, interval=poll):
                since = batch.last_id
                if batch.reset or name in batch.deleted:
                    fresh = None  # the read below answers (or raises JobNotFoundError)
                    break
                for changed in batch.jobs:
                    if changed.name == name:
                        fresh = changed
                if fresh is not None and fresh.status.terminal:
                    return fresh
            record = self.get(name) if fresh is None else fresh
        return record

    def metrics(
        self, name: str, limit: int | None = None, since: str | None = None
    ) -> dict[str, Any]:
        """Training scalars and GPU samples the job has reported so far, and a cursor:
        pass it back as ``since`` to get only what came after (``Backend.metrics``). The
        one way surfaces read metrics: no surface knows where a backend keeps them."""
        return self._find(name).metrics(name, limit=limit, since=since)

    def nodes(self, backend: str | None = None) -> builtins.list[NodeInfo]:
        """Hosts (nodes) with their GPUs and allocations."""
        return self.backend(backend).nodes()

    def backends(self) -> builtins.list[dict[str, Any]]:
        """Every backend the registry knows: name, whether it is the default, its
        capabilities (None, with the error and hint, when it cannot load here)."""
        out: builtins.list[dict[str, Any]] = []
        for name in backend_names():
            entry: dict[str, Any] = {"name": name, "default": name == self.settings.backend}
            try:
                caps = self.backend(name).capabilities().to_dict()
                entry.update(capabilities=caps, error=None, hint=None)
            except BackendUnavailableError as e:
                entry.update(capabilities=None, error=str(e), hint=e.hint)
            out.append(entry)
        return out

    def counts(self) -> dict[str, int]:
        """Jobs per status."""
        return {s.value: self.store.count([s.value]) for s in JobStatus}
