"""The Python API: ``workbench.submit(...)``, ``workbench.get(name)``, ``workbench.jobs()``."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, overload

from ._spec_limits import MAX_SPEC_FILE
from .errors import SpecError, WorkbenchError
from .kubeflow_manifest import check_runs_here, export_yaml, load_file, load_spec_file
from .kubeflow_manifest import from_manifest as _from_manifest
from .manager import JobManager
from .plan import Plan
from .spec import JobRecord, JobStatus, TrainSpec
from .tables import describe, format_duration

__all__ = [
    "Job",
    "LogLines",
    "default_manager",
    "describe",
    "export",
    "format_duration",
    "from_manifest",
    "get",
    "jobs",
    "submit",
]

_managers: dict[tuple[tuple[str, str], ...], JobManager] = {}


def default_manager() -> JobManager:
    """The process-wide manager for the current WORKBENCH_* environment."""
    # Every WORKBENCH_* setting is part of the key: a notebook that sets one (a home, a
    # backend, this host's price) gets a manager that honours it.
    key = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("WORKBENCH_")))
    if key not in _managers:
        _managers[key] = JobManager()
    return _managers[key]


class Job:
    """A handle on one job; every read goes to the store or cluster, never a stale copy."""

    def __init__(
        self, name: str, manager: JobManager | None = None, record: JobRecord | None = None
    ):
        self.name = name
        self.manager = manager or default_manager()
        self._record = record

    @property
    def record(self) -> JobRecord:
        """The job's current record (fetched fresh)."""
        self._record = self.manager.get(self.name)
        return self._record

    @property
    def status(self) -> JobStatus:
        """Current status."""
        return self.record.status

    def wait(self, timeout: float | None = None) -> JobRecord:
        """Block until the job ends or ``timeout`` seconds pass."""
        self._record = self.manager.wait(self.name, timeout=timeout)
        return self._record

    def logs(self, rank: int | None = 0, follow: bool = False, tail: int | None = None) -> LogLines:
        """Lines of rank ``rank``'s output (every rank's with None); ``follow`` goes to the end.

        Iterate it for the lines; a cell that ends with it shows them as text.
        """
        return LogLines(self.manager.logs(self.name, rank=rank, follow=follow, tail=tail))

    def cancel(self) -> JobRecord:
        """Stop every process of the job."""
        self._record = self.manager.cancel(self.name)
        return self._record

    def delete(self) -> None:
        """Forget the finished job and remove its files (cancel a running one first)."""
        self.manager.delete(self.name)

    def rerun(self, name: str | None = None) -> Job:
        """Run the same spec and script snapshot again as a new job."""
        record = self.manager.rerun(self.name, new_name=name)
        return Job(record.name, self.manager, record)

    def to_dict(self) -> dict[str, Any]:
        """The wire model of the current record."""
        return self.record.to_dict()

    def __repr__(self) -> str:
        # Fresh on every call: a handle printed after a cancel must not say Running.
        try:
            record = self.record
        except WorkbenchError as e:  # deleted, or its backend is gone: say so, no traceback
            return f"Job {self.name}: {e}"
        return describe(record)

    def _ipython_display_(self) -> None:
        """Show the live widget under a display id, so its text form is updated when the job
        ends (a saved notebook then reads Succeeded, not the first snapshot's Running)."""
        from .widgets import show_job  # lazy: api.py must import without ipywidgets

        show_job(self, describe(self.record))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """The live job widget in a Jupyter kernel; the text form in terminals and text outputs."""
        from .widgets import job_mimebundle  # lazy: api.py must import without ipywidgets

        return job_mimebundle(self, describe(self.record))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class LogLines:
    """A job's log lines: an iterator, which a notebook cell displays as text, not as an object."""

    SHOWN = 200  # lines a cell shows; iterate for all of them

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines = lines

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        return next(self._lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """The last ``SHOWN`` lines as text, with a note when there were more."""
        last: deque[str] = deque(maxlen=self.SHOWN)
        count = 0
        for line in self._lines:
            last.append(line)
            count += 1
        if count > self.SHOWN:
            p.text(
                f"[{count - self.SHOWN} earlier lines not shown: iterate the logs, "
                f"or pass tail=N]\n"
            )
        p.text("\n".join(last))


@overload
def submit(
    command: str | list[str] | TrainSpec | None = None,
    *,
    file: str | Path | None = None,
    wait: bool = False,
    dry_run: Literal[False] = False,
    manager: JobManager | None = None,
    manifest: str | Path | dict[str, Any] | None = None,
    image_map: dict[str, str] | None = None,
    **fields: Any,
) -> Job: ...


@overload
def submit(
    command: str | list[str] | TrainSpec | None = None,
    *,
    file: str | Path | None = None,
    wait: bool = False,
    dry_run: Literal[True],
    manager: JobManager | None = None,
    manifest: str | Path | dict[str, Any] | None = None,
    image_map: dict[str, str] | None = None,
    **fields: Any,
) -> Plan: ...


def submit(
    command: str | list[str] | TrainSpec | None = None,
    *,
    file: str | Path | None = None,
    wait: bool = False,
    dry_run: bool = False,
    manager: JobManager | None = None,
    manifest: str | Path | dict[str, Any] | None = None,
    image_map: dict[str, str] | None = None,
    **fields: Any,
) -> Job | Plan:
    """Submit a job: a command (string or argv), a TrainSpec, a YAML ``file`` (a spec or a
    Kubeflow manifest) or a Kubeflow ``manifest`` (a path, YAML text or a dict); fields
    override. ``image_map`` runs a manifest's unpullable image from a local folder.

    With ``dry_run=True`` nothing is created: every check runs and the Plan comes back."""
    manager = manager or default_manager()
    if isinstance(command, TrainSpec):
        spec = command
    else:
        data: dict[str, Any] = {}
        backend = fields.get("backend") or manager.settings.backend
        from_kubeflow = manifest is not None
        if file is not None or manifest is not None:
            if file is not None and manifest is not None:
                raise SpecError("manifest", "given with file", "give one of them")
            if manifest is not None:
                loaded = from_manifest(manifest, image_map=image_map, backend=backend)
            else:
                loaded, from_kubeflow = load_file(file or "", image_map, backend)
            data = {k: v for k, v in loaded.to_dict().items() if v not in (None, [], {})}
        if command is not None:
            data["command"] = command if isinstance(command, str) else list(command)
        data.update(fields)
        spec = TrainSpec.from_dict(data)
        if from_kubeflow and backend == "local":  # its image is not pulled for processes
            check_runs_here(spec, image_map)
    if dry_run:
        return manager.admit(spec)
    record = manager.submit(spec)
    job = Job(record.name, manager, record)
    if wait:
        job.wait()
    return job


def from_manifest(
    manifest: str | Path | dict[str, Any],
    image_map: dict[str, str] | None = None,
    backend: str | None = None,
) -> TrainSpec:
    """The TrainSpec of a Kubeflow PyTorchJob/TFJob/MPIJob: a file path, YAML text or a dict
    (workbench.kubeflow_manifest says what maps to what; an unsupported field is a
    SpecError naming its path)."""
    if isinstance(manifest, dict):
        return _from_manifest(manifest, image_map=image_map, backend=backend)
    if isinstance(manifest, str) and "\n" in manifest:
        import yaml

        if len(manifest) > MAX_SPEC_FILE:
            raise SpecError("manifest", f"is larger than {MAX_SPEC_FILE} bytes", "make it smaller")
        try:
            data = yaml.safe_load(manifest)
        except yaml.YAMLError as e:
            raise SpecError("manifest", f"is not valid YAML: {' '.join(str(e).split())}") from None
        return _from_manifest(data, image_map=image_map, backend=backend)
    spec = load_spec_file(manifest, image_map, backend)
    return spec


def export(name: str, kind: str = "pytorchjob", manager: JobManager | None = None) -> str:
    """The manifest YAML of job ``name`` (any backend) as ``kind``: indexed, pytorchjob,
    tfjob, mpijob or volcano; credentials masked."""
    manager = manager or default_manager()
    return export_yaml(manager.get(name), kind, manager.catalog, manager.settings.kubernetes)


def get(name: str, manager: JobManager | None = None) -> Job:
    """The job called ``name`` (raises JobNotFoundError)."""
    manager = manager or default_manager()
    return Job(name, manager, manager.get(name))


def jobs(status: str | list[str] | None = None, manager: JobManager | None = None) -> list[Job]:
    """All jobs, newest first, optionally only those in ``status``."""
    manager = manager or default_manager()
    wanted = [status] if isinstance(status, str) else status
    return [Job(r.name, manager, r) for r in manager.list(status=wanted)]
