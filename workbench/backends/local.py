"""The local backend: jobs as process groups on this machine, each under a detached supervisor.

State lives in the SQLite store under WORKBENCH_HOME, so a kernel, the Jupyter server and
the CLI see the same jobs, and a job outlives the process that submitted it.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

from ..catalog import Catalog, load_catalog
from ..errors import (
    JobNotFoundError,
    MonitorUnavailableError,
    SpecError,
    SubmitError,
)
from ..plan import Plan
from ..settings import Settings, make_private_dir
from ..spec import ACTIVE_STATUSES, JobEvent, JobRecord, JobStatus, RankState, TrainSpec
from ..store import JobStore
from ._admission import check_program, container_plan, plan_placement
from ._diskspace import mount_point
from ._jobfiles import JobFiles
from ._logread import read_logs, tail_view
from ._processes import kill_job_processes, same_process
from .base import Backend, Capabilities, GpuHolder, GpuInfo, NodeInfo, NodeJob, new_job_name

ACTIVE = list(ACTIVE_STATUSES)  # Pending, Running, Cancelling


class LocalBackend(Backend):
    """Runs each worker as a local process group; the embedded default."""

    name = "local"

    def __init__(
        self,
        settings: Settings | None = None,
        catalog: Catalog | None = None,
        store: JobStore | None = None,
    ) -> None:
        self.settings = settings or Settings.load()
        self.catalog = catalog or load_catalog(self.settings.catalog_file)
        self.home = Path(self.settings.home)
        make_private_dir(self.home)  # 0700: jobs.db and job folders hold credentials
        (self.home / "jobs").mkdir(exist_ok=True, mode=0o700)
        # The JobManager's store, shared by every backend; a backend built on its own (a
        # test, a script) opens the same file under the same home.
        self.store = store if store is not None else JobStore(self.home / "jobs.db")

    # ---- admit / launch -------------------------------------------------------------------
    options = {
        "runtime": "process | container: run the workers this way instead of the automatic "
        "choice (containers when an engine answers)",
    }

    def validate_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``runtime`` (process | container) only; anything else names the valid keys."""
        options = super().validate_options(options)
        runtime = options.get("runtime")
        if "runtime" in options and runtime not in ("process", "container"):
            raise SpecError(
                "backend_options.runtime",
                f"unknown runtime {runtime!r}",
                "use process or container",
            )
        return options

    def admit(self, spec: TrainSpec) -> Plan:
        """Every check LocalBackend makes and where each rank would run; creates nothing."""
        spec.validate(self.catalog)
        options = self.validate_options(spec.backend_options)
        if options.get("runtime") and spec.runtime not in ("auto", options["runtime"]):
            raise SpecError(
                "backend_options.runtime",
                f"is {options['runtime']} but the spec's runtime is {spec.runtime}",
                "give one of them",
            )
        spec.working_dir = str(Path(spec.working_dir or os.getcwd()).resolve())
        if not Path(spec.working_dir).is_dir():
            raise SpecError(
                "working_dir", f"{spec.working_dir} is not a directory", "create it or pick another"
            )
        image = spec.image_ref(self.catalog)
        container = container_plan(spec, image, options.get("runtime"))
        if container is None:
            check_program(spec)
        generated = spec.name is None
        name = self._new_name(spec) if generated else spec.name
        assert name is not None
        if not generated and self.store.exists(name):
            raise SpecError(
                "name",
                f"a job named {name!r} already exists",
                f"pick another --name, or `workbench delete {name}` first",
            )
        warnings: builtins.list[str] = []
        placement = plan_placement(spec, self.store, self.name, warnings)
        self._check_mounts(spec)
        if container is None and spec.runtime != "process" and "runtime" not in options:
            warnings.append(
                f"no container engine answers: image {spec.image} is not pulled; the workers "
                f"run as local processes in {sys.prefix}"
            )
        elif container is not None and container.pull:
            warnings.append(f"image {image} is not on this machine: the first rank pulls it")
        plan = Plan(
            backend=self.name,
            name=name,
            spec=spec,
            runtime="process" if container is None else "container",
            image=image,
            # This host's price, as configured (0 by default): the catalogue's are the cloud's.
            price_per_hour=self.settings.local_price_per_hour,
            placement=placement,
            warnings=warnings,
            # launch saves the container plan in the job folder, and replaces a generated
            # name that another submit takes in between
            backend_state={"container": container, "generated_name": generated},
        )
        return plan

    def launch(self, plan: Plan) -> JobRecord:
        """Snapshot, record Pending, start the detached supervisor; returns at once.

        A generated name that another submit took after ``admit`` is replaced by a fresh
        one; a name the user chose is an error (``SpecError`` on ``name``).
        """
        if plan.backend != self.name:
            raise SubmitError(self.name, f"the plan is for backend {plan.backend!r}")
        command = list(plan.spec.command)
        for _ in range(5):
            try:
                return self._launch_as(plan)
            except SpecError as e:
                if e.field != "name" or not plan.backend_state.get("generated_name"):
                    raise
                plan.spec.command = list(command)  # undo the rerun snapshot's rewrite
                plan.name = self._new_name(plan.spec)
        return self._launch_as(plan)

    def _launch_as(self, plan: Plan) -> JobRecord:
        spec = plan.spec
        spec.name = plan.name
        container = plan.backend_state.get("container")
        files = JobFiles(self.home / "jobs" / spec.name)
        snapshot = files.plan_snapshot(spec.command, spec.working_dir)
        # A rerun names another job's snapshot copies: run its own copies instead, so the
        # rerun (and its retries) outlive a delete of the original job.
        jobs_root = (self.home / "jobs").resolve()
        for i, (src, dst) in snapshot.items():
            if src.resolve().is_relative_to(jobs_root):
                spec.command[i] = str(dst)
        safe = spec.redacted()
        record = JobRecord(
            name=spec.name,
            status=JobStatus.PENDING,
            backend=self.name,
            spec=safe.to_dict(),
            image=plan.image,
            runtime=plan.runtime,
            price_per_hour=plan.price_per_hour,
            job_dir=str(files.dir),
            # on the wire under details (runtime is this backend's concept, not every one's)
            details={"runtime": plan.runtime},
            events=[
                JobEvent(
                    time.time(),
                    "Submitted",
                    f"{spec.workers} worker(s) x {spec.procs_per_worker} process(es); image "
                    + (
                        f"{spec.image} runs as local processes in {sys.prefix} (no container engine)"
                        if container is None
                        else f"{container.image} runs as containers on {container.flavour} "
                        f"({container.engine})"
                    ),
                )
            ],
        )
        # The record and the folder come together or not at all: the insert claims the name
        # first (a same-name race's loser stops there), the folder is made inside the
        # transaction, and any failure rolls both back.
        created = False
        try:
            with self.store.adding(record):
                try:
                    files.create()
                except FileExistsError:
                    raise SpecError(
                        "name",
                        f"{files.dir} exists but no job is called {spec.name!r}",
                        "pick another --name or remove that folder",
                    ) from None
                created = True
                if container is not None:
                    container.save(files.dir)
                files.write_spec(safe)
                files.write_secrets(spec.secrets())  # real mount URLs and env values: 0600 only
                files.take_snapshot(snapshot)
        except BaseException as e:
            if created:
                shutil.rmtree(files.dir, ignore_errors=True)
            if isinstance(e, sqlite3.IntegrityError):
                raise SpecError(
                    "name",
                    f"a job named {spec.name!r} already exists",
                    f"pick another --name, or `workbench delete {spec.name}` first",
                ) from None
            if isinstance(e, OSError):
                why = (
                    f"no space left on {mount_point(files.dir.parent)}"
                    if e.errno == errno.ENOSPC
                    else e.strerror or str(e)
                )
                raise SubmitError(self.name, f"could not write {files.dir}: {why}") from e
            raise
        try:
            self._launch_supervisor(spec.name)
        except OSError as e:
            msg = f"could not start the job supervisor: {e}"
            self.store.update(
                spec.name,
                status=JobStatus.FAILED,
                message=msg,
                finished_at=time.time(),
                event=JobEvent(time.time(), "Failed", msg, "error"),
            )
            raise SubmitError(self.name, msg) from e
        return self.get(spec.name)

    def _launch_supervisor(self, name: str) -> None:
        # A job submitted from inside another job must not carry the outer job's markers:
        # cleanup of the outer job finds its processes by WORKBENCH_JOB_DIR.
        env = {k: v for k, v in os.environ.items() if not k.startswith("WORKBENCH_JOB_")}
        env["WORKBENCH_STOP_GRACE"] = str(self.settings.stop_grace)
        # The launcher forks the real supervisor into its own session and exits at once,
        # so no zombie is left in a long-lived kernel or server.
        subprocess.run(
            [
                sys.executable,
                "-m",
                "workbench.backends._supervisor",
                "--detach",
                str(self.home),
                name,
            ],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            timeout=60,
        )

    def _new_name(self, spec: TrainSpec) -> str:
        return new_job_name(spec.command, self.store.exists)

    def _check_mounts(self, spec: TrainSpec) -> None:
        """Bad mounts fail here, at submit, naming what and where (workbench.data)."""
        from ..data.staging import check_mounts

        def active(name: str) -> bool:  # reconciled: a job whose supervisor died is not live
            try:
                return not self.get(name).status.terminal
            except JobNotFoundError:
                return False

        check_mounts(spec, self.home, self.settings, active)

    # ---- read ---------------------------------------------------------------------------
    def get(self, name: str) -> JobRecord:
        """The job's record, reconciled with reality (a dead supervisor fails the job)."""
        record = self.store.get(name)
        if record is None or record.backend != self.name:  # another backend's row: not ours
            raise JobNotFoundError(self.name, name)
        if not record.status.terminal and self._supervisor_lost(name):
            record = self.store.get(name) or record
        return record

    def reconcile(self) -> int:
        """Fail every active job whose supervisor is gone; how many. Cheap (the active rows
        and a PID check each), so the server's watcher runs it every tick."""
        rows = self.store.active_rows(backend=self.name)
        return sum(self._supervisor_lost(row["name"], row) for row in rows)

    def _supervisor_lost(self, name: str, row: dict[str, Any] | None = None) -> bool:
        """Fail an active job whose supervisor is gone, killing every process it left and
        finishing every rank record; True when it did."""
        row = row or self.store.row(name)
        if row is None or row["status"] not in ACTIVE:
            return False
        pid, ctime = row["details"].get("supervisor_pid"), row["details"].get("supervisor_ctime")
        if pid is None:
            if time.time() - row["created_at"] < 60:
                return False  # still starting
        elif same_process(pid, ctime):
            return False
        row = self.store.row(name)  # it may have finished while we looked
        if row is None or row["status"] not in ACTIVE:
            return False
        self._kill_job(name, row)
        log = Path(row["details"].get("job_dir") or "") / "supervisor.log"
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        if row["cancel_requested"]:  # what the user asked for happened, if not by the book
            status, reason, level = JobStatus.CANCELLED, "Cancelled", "warning"
            msg = "cancelled by user (the supervisor ended before it recorded the end)"
        else:
            status, reason, level = JobStatus.FAILED, "SupervisorLost", "error"
            msg = "the job's supervisor process ended unexpectedly"
            msg += f": {tail[0]}" if tail else ""
        return self.store.finish_if_active(
            name, status, msg, JobEvent(time.time(), reason, msg, level), RankState.STOPPED
        )

    def _running_rank_pids(self, name: str) -> builtins.list[int]:
        """Process-group leaders of the job's ranks that still run (from our details)."""
        return [
            r["details"]["pid"]
            for r in self.store.rank_rows(name)
            if r["details"].get("pid")
            and r["state"] == RankState.RUNNING.value
            and same_process(r["details"]["pid"], r["details"].get("ctime"))
        ]

    def _rankssame_process(self, name: str) -> bool:
        return bool(self._running_rank_pids(name))

    def _kill_job(self, name: str, row: dict[str, Any]) -> None:
        """SIGKILL every process of the job: the rank leaders' groups, and whatever carries
        the job's folder in its environment (children that called setsid or were orphaned).
        A container job's containers are removed through the engine (its wrappers are killed
        like any rank, which would leave the containers running)."""
        pgids = self._running_rank_pids(name)
        job_dir = row["details"].get("job_dir") or str(self.home / "jobs" / name)
        kill_job_processes(job_dir, pgids)
        if row.get("runtime") == "container":
            from ._container_engine import remove_job_objects

            # Best effort: an engine that is gone or an SDK that is missing leaves nothing
            # we could remove, and must not keep the job from being recorded as ended.
            with contextlib.suppress(Exception):
                remove_job_objects(job_dir, name)

    # ---- cancel / delete ----------------------------------------------------------------
    def cancel(self, name: str, wait: float = 30.0) -> JobRecord:
        """Ask the supervisor to stop the gang: the job is Cancelling until the supervisor
        records Cancelled. ``wait <= 0`` returns at once with the Cancelling record (the
        supervisor escalates to SIGKILL after stop_grace itself); otherwise waits until
        every process is gone."""
        record = self.get(name)
        if record.status.terminal:
            return record
        # Recorded before anything is signalled, so every reader sees the stop under way.
        self.store.request_cancel(
            name,
            JobEvent(
                time.time(),
                "Cancelling",
                f"cancel requested; every process stops within {self.settings.stop_grace:g} s",
                "warning",
            ),
        )
        row = self.store.row(name) or {"details": {}}
        pid, ctime = row["details"].get("supervisor_pid"), row["details"].get("supervisor_ctime")
        if pid and same_process(pid, ctime):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        # A supervisor not started yet reads cancel_requested before it starts any rank.
        if wait <= 0:
            return self.get(name)
        deadline = time.time() + max(wait, self.settings.stop_grace + 5)
        while time.time() < deadline:
            record = self.get(name)
            if record.status.terminal:
                if not (pid and same_process(pid, ctime)):
                    return record
            time.sleep(0.05)
        # Every rank gone but the supervisor still busy: it is sending outputs back (see
        # workbench.data); killing it would lose them. Return; it records Cancelled itself.
        if pid and same_process(pid, ctime) and not self._rankssame_process(name):
            return self.get(name)
        # The supervisor did not answer: do its job.
        if pid and same_process(pid, ctime):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._kill_job(name, self.store.row(name) or row)
        self.store.finish_if_active(
            name,
            JobStatus.CANCELLED,
            "cancelled by user (supervisor did not answer)",
            JobEvent(time.time(), "Cancelled", "cancelled by user", "warning"),
            RankState.STOPPED,
        )
        return self.get(name)

    def delete(self, name: str) -> None:
        """Forget a finished job and remove its folder."""
        record = self.get(name)
        if not record.status.terminal:
            raise SpecError(
                "name", f"job {name!r} is {record.status.value}", "cancel it before deleting"
            )
        self.store.delete(name)
        if record.job_dir:
            shutil.rmtree(record.job_dir, ignore_errors=True)

    def rerun_spec(self, name: str) -> TrainSpec:
        """The job's spec with its snapshot scripts and saved credentials."""
        record = self.get(name)
        files = JobFiles(Path(record.job_dir or ""))
        spec = TrainSpec.from_dict(record.spec).restore_secrets(files.read_secrets())
        spec.command = files.snapshot_command(spec.command)
        spec.name = None
        if spec.working_dir and not Path(spec.working_dir).is_dir():
            spec.working_dir = None
        return spec

    # ---- logs ---------------------------------------------------------------------------
    def logs(
        self,
        name: str,
        rank: int | None = 0,
        follow: bool = False,
        tail: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[str]:
        """Lines of one rank's log, or of every rank (prefixed) with ``rank=None``.

        With follow, keeps reading until the job ends or ``stop`` is set.
        """
        record = self.get(name)
        if rank is not None and not 0 <= rank < record.workers:
            raise SpecError(
                "rank", f"job {name!r} has ranks 0..{record.workers - 1}", f"got {rank}"
            )
        if tail is not None and tail < 0:
            raise SpecError("tail", f"got {tail}", "give a number of lines >= 0")
        files = JobFiles(Path(record.job_dir or ""))
        ranks = range(record.workers) if rank is None else [rank]
        return read_logs(
            [(r, files.log_path(r)) for r in ranks],
            follow,
            tail,
            lambda: self.get(name).status.terminal,
            stop=stop,
            prefix=rank is None,
        )

    def log_tail(self, name: str, rank: int, lines: int) -> builtins.list[str]:
        """The last ``lines`` displayed lines of ``rank``, reading at most 1 MiB of its log."""
        record = self.get(name)
        if not 0 <= rank < record.workers:
            raise SpecError(
                "rank", f"job {name!r} has ranks 0..{record.workers - 1}", f"got {rank}"
            )
        return tail_view(JobFiles(Path(record.job_dir or "")).log_path(rank), lines)

    # ---- metrics ------------------------------------------------------------------------
    def metrics(
        self, name: str, limit: int | None = None, since: str | None = None
    ) -> dict[str, Any]:
        """What the copier split off the ranks' output and the GPU recorder sampled, from
        the job's metric files (``Backend.metrics``)."""
        from ..monitor.metrics import read_job_metrics

        record = self.store.get(name)  # no reconcile: a read of files, for live views
        if record is None or record.backend != self.name:
            raise JobNotFoundError(self.name, name)
        if not record.job_dir:
            return {"scalars": [], "gpu": [], "cursor": since or ""}
        return read_job_metrics(record.job_dir, limit=limit, since=since)

    # ---- hosts --------------------------------------------------------------------------
    def capabilities(self) -> Capabilities:
        """Processes always; containers when an engine answers now (its flavour named);
        whole and fractional GPUs; the data schemes workbench.data mounts on one host."""
        from ..data.urls import IN_PLACE, OBJECT_STORES
        from ._container_engine import connect, engine_flavour, resolve_runtime

        runtimes, flavours = ["process"], []
        runtime, url, _why = resolve_runtime("auto")
        if runtime == "container" and url is not None:
            try:
                flavours.append(engine_flavour(connect(url, timeout=5)))
                runtimes.append("container")
            except Exception:  # an engine that stopped answering since the ping: no containers
                pass
        # pvc:// (CLUSTER_ONLY) needs a cluster: not here.
        schemes = sorted({*OBJECT_STORES, *(s for s in IN_PLACE if s)})
        return Capabilities(
            runtimes=tuple(runtimes),
            gpu_modes=("whole", "fractional"),
            data_schemes=tuple(schemes),
            flavours=tuple(flavours),
        )

    def nodes(self) -> builtins.list[NodeInfo]:
        """This host: its GPUs (or why none) and which jobs hold them."""
        from ..monitor import gpu_inventory, live_figures

        reason = None
        try:
            inventory = gpu_inventory()
        except MonitorUnavailableError as e:
            inventory, reason = [], e.reason
        holders: dict[int, builtins.list[GpuHolder]] = {g.index: [] for g in inventory}
        jobs = []
        for row in self.store.active_rows(backend=self.name):  # this host's jobs only
            spec = json.loads(row["spec_json"])
            alloc = row["details"].get("gpu_alloc") or []
            share = float(spec.get("gpus", 0))
            for rank, indices in enumerate(alloc):
                for i in indices:
                    holders.setdefault(i, []).append(GpuHolder(row["name"], rank, min(share, 1.0)))
            jobs.append(NodeJob(row["name"], row["status"], share * int(spec.get("workers", 1))))
        live = live_figures() if inventory else {}  # the host sampler's latest figures
        gpus = [
            GpuInfo(
                index=g.index,
                uuid=g.uuid,
                name=g.name,
                memory_total=g.memory_total,
                allocated=sum(h.share for h in holders[g.index]),
                holders=tuple(holders[g.index]),
                **live.get(g.index, {}),  # None where unknown
            )
            for g in inventory
        ]
        return [
            NodeInfo(
                name=socket.gethostname(),
                backend=self.name,
                cpu_count=os.cpu_count(),
                memory_total=psutil.virtual_memory().total,
                gpus=tuple(gpus),
                gpu_reason=reason,
                active_jobs=tuple(jobs),
            )
        ]
