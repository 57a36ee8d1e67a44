"""JobManager: the one API every surface (Python, CLI, magics, server) calls."""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Iterator
from typing import Any

from .backends import backend_names, load_backend
from .backends.base import Backend
from .catalog import Catalog, load_catalog
from .errors import JobNotFoundError
from .settings import Settings
from .spec import JobRecord, JobStatus, TrainSpec


class JobManager:
    """Routes jobs to backends and keeps the surfaces free of backend details."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings.load()
        self.catalog: Catalog = load_catalog(self.settings.catalog_file)
        self._backends: dict[str, Backend] = {}

    def backend(self, name: str | None = None) -> Backend:
        """The backend called ``name`` (the configured default when None), created once."""
        name = name or self.settings.backend
        if name not in self._backends:
            self._backends[name] = load_backend(name, settings=self.settings, catalog=self.catalog)
        return self._backends[name]

    def submit(self, spec: TrainSpec) -> JobRecord:
        """Validate and start a job; returns its Pending record."""
        spec.validate(self.catalog, backends=backend_names())
        return self.backend(spec.backend).submit(spec)

    def _find(self, name: str) -> Backend:
        """The backend that knows job ``name``."""
        last: JobNotFoundError | None = None
        for backend in self._known_backends():
            try:
                backend.get(name)
                return backend
            except JobNotFoundError as e:
                last = e
        raise last or JobNotFoundError(self.settings.backend, name)

    def _known_backends(self) -> list[Backend]:
        names = [self.settings.backend, *[n for n in self._backends if n != self.settings.backend]]
        return [self.backend(n) for n in names]

    def get(self, name: str) -> JobRecord:
        """The current record of job ``name``."""
        return self._find(name).get(name)

    def list(
        self, status: list[str] | None = None, limit: int | None = None, offset: int = 0
    ) -> list[JobRecord]:
        """Jobs of every backend in use, newest first."""
        return self.page(status=status, limit=limit, offset=offset)[0]

    def page(
        self,
        status: builtins.list[str] | None = None,
        limit: int | None = None,
        offset: int = 0,
        backend: str | None = None,
    ) -> tuple[builtins.list[JobRecord], int]:
        """One page of jobs, newest first, and how many match in all."""
        backends = [self.backend(backend)] if backend else self._known_backends()
        if len(backends) == 1:  # the store pages and counts; nothing else is read
            (b,) = backends
            return b.list(status=status, limit=limit, offset=offset), b.count(status)
        records = [r for b in backends for r in b.list(status=status)]
        records.sort(key=lambda r: r.created_at, reverse=True)
        end = None if limit is None else offset + limit
        return records[offset:end], len(records)

    def cancel(self, name: str, wait: float = 30.0) -> JobRecord:
        """Stop the job and every process of it; ``wait=0`` asks and returns at once."""
        return self._find(name).cancel(name, wait=wait)

    def reconcile(self) -> int:
        """Let every backend in use settle jobs whose runner died (e.g. a killed supervisor)."""
        return sum(b.reconcile() for b in self._known_backends())

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

    def wait(self, name: str, timeout: float | None = None, poll: float = 0.1) -> JobRecord:
        """Block until the job ends (or ``timeout`` seconds pass); returns the record."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = 0.02
        while True:
            record = self.get(name)
            if record.status.terminal:
                return record
            if deadline is not None and time.monotonic() >= deadline:
                return record
            time.sleep(delay)
            delay = min(delay * 1.5, poll)

    def metrics(
        self, name: str, limit: int | None = None
    ) -> dict[str, builtins.list[dict[str, Any]]]:
        """Training scalars and GPU samples the job has reported so far."""
        from .monitor.metrics import read_job_metrics

        record = self.get(name)
        if not record.job_dir:
            return {"scalars": [], "gpu": []}
        return read_job_metrics(record.job_dir, limit=limit)

    def nodes(self, backend: str | None = None) -> builtins.list[dict[str, Any]]:
        """Hosts with GPUs and allocations."""
        return self.backend(backend).nodes()

    def counts(self) -> dict[str, int]:
        """Jobs per status."""
        backends = self._known_backends()
        return {s.value: sum(b.count([s.value]) for b in backends) for s in JobStatus}
