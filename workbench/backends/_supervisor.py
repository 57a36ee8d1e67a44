"""The detached supervisor of one local job.

``python -m workbench.backends._supervisor --detach HOME NAME`` forks a grandchild in its own
session (so the job outlives the kernel, server or shell that submitted it) and exits at
once. The grandchild places the job on GPUs, starts every worker in its own process group
with the contract env, waits on them (pidfds, no busy loop), applies gang semantics and
retries, and records everything in the store. Cancel is SIGTERM to the supervisor.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from .. import contract
from ..errors import MountError
from ..redaction import redact_text, secret_strings
from ..spec import JobEvent, JobStatus, RankState, TrainSpec
from ..store import JobStore
from . import _container_engine as _container
from . import _placement, gpu_queue
from ._diskspace import DiskFull, is_disk_full, low_space, mount_point, reserve_space
from ._jobfiles import JobFiles
from ._journal import StoreJournal
from ._logcopy import LogCopier
from ._processes import (
    become_subreaper,
    describe_exit,
    free_ports,
    has_launcher,
    human_duration,
    kill_and_reap_descendants,
    kill_job_processes,
    killpg,
    process_ctime,
    same_process,
)

if TYPE_CHECKING:  # both load lazily: a supervisor without mounts or GPUs skips them
    from ..data.staging import JobData
    from ..monitor.recorder import JobGpuRecorder

HOST = socket.gethostname()
_DONE = {JobStatus.SUCCEEDED: "every rank exited with code 0"}


class Stop(Exception):
    """Raised inside the supervisor when a cancel arrives."""


@dataclass
class Worker:
    """The processes of one rank in the current attempt."""

    rank: int
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    pgid: int = 0
    done: bool = False


class Supervisor:
    """Runs one job to its end."""

    def __init__(self, home: Path, name: str) -> None:
        self.home = home
        self.name = name
        self.store = JobStore(home / "jobs.db")
        row = self.store.row(name)
        if row is None:
            raise SystemExit(f"no job {name!r} in {home}")
        self.files = JobFiles(Path(row["details"]["job_dir"]))
        # The stored spec is redacted; the real mount URLs, args and env are in the 0600 file.
        self.spec = TrainSpec.from_dict(json.loads(row["spec_json"]))
        self.spec.restore_secrets(self.files.read_secrets())
        self.attempt = int(row["attempt"])
        self.runtime = row.get("runtime") or "process"  # "container": ranks run in containers
        self.stop_grace = float(os.environ.get("WORKBENCH_STOP_GRACE", "10"))
        self.cancelled = False
        self._watchdog: threading.Timer | None = None
        self.workers: list[Worker] = []
        self.gpu_alloc: list[list[int]] = [[] for _ in range(self.spec.workers)]
        # What staging and the GPU recorder may touch: this job's message, events, rank pids.
        self.journal = StoreJournal(self.store, name)
        self.data: JobData | None = None  # set once staging begins (outputs upload at the end)
        self.data_env: dict[str, str] = {}
        self.gpu_recorder: JobGpuRecorder | None = None
        self.deadline: float | None = None
        self.selector = selectors.DefaultSelector()
        # Ranks write to pipes it reads: user lines to the logs, run.log records to metrics.
        self.copier: LogCopier | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # ---- signals ------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        self.cancelled = True
        if self._watchdog is None:
            # Cancel returns at once, so nobody else escalates: if the main thread is held
            # up (a slow staging call, a hung engine), kill the ranks after the grace anyway.
            self._watchdog = threading.Timer(self.stop_grace + 5, self._force_stop)
            self._watchdog.daemon = True
            self._watchdog.start()

    def _force_stop(self) -> None:
        """SIGKILL every rank process (by group and by the job's env marker), not us."""
        kill_job_processes(str(self.files.dir), [w.pgid for w in list(self.workers) if w.pgid])

    def install_signals(self) -> None:
        """SIGTERM/SIGINT/SIGHUP mean cancel; the wakeup fd interrupts the wait at once."""
        signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        # gpu_queue's wake-up: only interrupts the wait (the byte lands on the wakeup fd)
        signal.signal(gpu_queue.WAKE_SIGNAL, lambda signum, frame: None)
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)

    def _check_cancel(self) -> None:
        if not self.cancelled:
            row = self.store.row(self.name)
            self.cancelled = bool(row and row["cancel_requested"])
        if self.cancelled:
            raise Stop

    # ---- the job ------------------------------------------------------------------------
    def run(self) -> None:
        """Place, start, watch, retry, record; a full disk is recorded, never a silent death."""
        reserve = reserve_space(self.files.dir)
        try:
            self._run()
        except Exception as e:
            if not is_disk_full(e, self.files.dir):
                raise
            self._record_disk_full(reserve)
        finally:
            with contextlib.suppress(OSError):
                reserve.unlink()

    def _record_disk_full(self, reserve: Path) -> None:
        """Stop every rank, give back the reserve, then record the end with the disk named."""
        msg = f"no space left on {mount_point(self.files.dir)}"
        with contextlib.suppress(Exception):  # it writes rank rows; the store may be full
            self.stop_all("disk full")
        kill_job_processes(str(self.files.dir), [])
        kill_and_reap_descendants()
        with contextlib.suppress(OSError):
            reserve.unlink()
        if self.runtime == "container":
            with contextlib.suppress(Exception):
                _container.supervisor_cleanup(self)
        with contextlib.suppress(Exception):
            from ..monitor.recorder import stop_job_recorder

            stop_job_recorder(self.gpu_recorder)
        with contextlib.suppress(OSError):
            print(f"[workbench] {msg}", flush=True)
        self.store.finish_if_active(
            self.name,
            JobStatus.FAILED,
            msg,
            JobEvent(time.time(), "DiskFull", msg, "error"),
            RankState.STOPPED,
        )

    def _run(self) -> None:
        me = psutil.Process()
        self.store.update(
            self.name, details={"supervisor_pid": me.pid, "supervisor_ctime": me.create_time()}
        )
        try:
            self._check_cancel()
            from ..data.staging import JobData, stage_job, store_active

            # prefetch object-store data, bind local paths (issue 5)
            self.data = JobData(
                self.spec, self.files.dir, self.home, active=store_active(self.store)
            )
            self.data_env = stage_job(self.data, self.journal, self._check_cancel)
            self.place()
            outcome = self.run_attempts()
        except LaunchFailed as e:
            self.stop_all("launch failed")
            self.store.set_rank(self.name, e.rank, state=RankState.FAILED, finished_at=time.time())
            self.finish(JobStatus.FAILED, str(e), "LaunchFailed", "error")
            return
        except Stop:
            self.stop_all("cancel")
            self.finish(JobStatus.CANCELLED, "cancelled by user", "Cancelled")
            return
        except MountError as e:  # staging failed; the message is already redacted
            self.stop_all("mount failed")
            self.finish(JobStatus.FAILED, str(e), "MountFailed", "error")
            return
        except Exception as e:  # record, never leave a job 'Running' behind
            if is_disk_full(e, self.files.dir):
                raise  # run() records it, after giving back the reserve
            self.stop_all("supervisor error")
            known = secret_strings(self.spec.secrets())  # an error may quote a URL or value
            with contextlib.suppress(OSError):  # stderr may sit on a full disk
                print(redact_text(traceback.format_exc(), known), file=sys.stderr, flush=True)
            why = redact_text(f"supervisor error: {e}", known)
            self.finish(JobStatus.FAILED, why, "SupervisorError", "error")
            return
        status, message, reason = outcome
        self.finish(status, message, reason, "info" if status is JobStatus.SUCCEEDED else "error")

    def finish(self, status: JobStatus, message: str, reason: str, level: str = "info") -> None:
        """Record the terminal state (last thing before exit)."""
        from ..data.staging import upload_job_outputs

        if self.runtime == "container":
            _container.supervisor_cleanup(self)
        # Outputs land before the status does, so a waiter finds them in place.
        status, message, reason, level = upload_job_outputs(
            self.data, self.journal, status, message, reason, level
        )
        from ..monitor.recorder import stop_job_recorder

        # The last GPU sample and alert events land before the end.
        stop_job_recorder(self.gpu_recorder)
        self.store.update(
            self.name,
            status=status,
            message=message,
            finished_at=time.time(),
            event=JobEvent(time.time(), reason, message or _DONE.get(status, status.value), level),
        )
        self.wake_queue()

    def place(self) -> None:
        """Hold GPUs for the job, queueing (Pending, with the reason) until they are free."""
        if self.spec.gpus <= 0:
            return
        from ..monitor import gpu_inventory

        capacity = [g.index for g in gpu_inventory()]
        announced, woken, seen = False, True, -1
        while True:
            # The decision is a function of the store's rows alone: when no other process
            # has committed since the last one (SQLite's data_version, read before the
            # rows), it has not changed, and a poll skips it. With 200 waiting, each
            # re-deciding over every row every 3 s cost ~0.4 CPU-s/s; a wake-up decides.
            version = self.store.data_version()
            if not woken and version == seen:
                woken = self._sleep(gpu_queue.POLL_SECONDS)
                continue
            # The one decision for the host (waiting jobs in queue order, gpu_queue), first
            # read without the lock: with hundreds waiting, each taking the lock to learn it
            # is not its turn made a convoy that held up the one whose turn it was.
            rows = self.store.active_rows(backend="local")  # this host's GPUs
            if self.name in gpu_queue.decide(rows, capacity):
                with self._placement_lock():
                    rows = self.store.active_rows(backend="local")
                    alloc = gpu_queue.decide(rows, capacity).get(self.name)
                    if alloc is not None:
                        self.gpu_alloc = alloc
                        self.store.update(self.name, details={"gpu_alloc": alloc}, message="")
                        return
            if not announced:
                used = _placement.usage(
                    [
                        (float(json.loads(r["spec_json"])["gpus"]), r["details"]["gpu_alloc"])
                        for r in rows
                        if r["details"].get("gpu_alloc")
                    ]
                )
                busy = sum(min(1.0, v) for v in used.values())
                msg = (
                    f"waiting for GPUs: needs {self.spec.gpus:g} x {self.spec.workers}, "
                    f"{len(capacity) - busy:g} of {len(capacity)} free"
                )
                self.store.update(
                    self.name, message=msg, event=JobEvent(time.time(), "Queued", msg)
                )
                announced = True
            # A supervisor that frees GPUs wakes the chosen ones (SIGUSR1); the poll is the
            # fallback for one that died without doing so (its row changes when it is
            # found lost, which the data_version check sees).
            seen = version
            woken = self._sleep(gpu_queue.POLL_SECONDS)

    def wake_queue(self) -> None:
        """After this job gave its GPUs back (or left the queue): start whoever is next."""
        if self.spec.gpus <= 0:
            return
        with contextlib.suppress(Exception):  # an optimisation: the waiters poll anyway
            from ..monitor import gpu_inventory

            capacity = [g.index for g in gpu_inventory()]
            with self._placement_lock():
                rows = self.store.active_rows(backend="local")
                chosen = gpu_queue.decide(rows, capacity)
            gpu_queue.wake(rows, chosen, same_process)

    @contextlib.contextmanager
    def _placement_lock(self) -> Iterator[None]:
        with open(self.home / "placement.lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def _sleep(self, seconds: float) -> bool:
        """Wait up to ``seconds`` or until woken (a signal's byte on the wake pipe);
        True when woken. Raises when the job was cancelled meanwhile."""
        woken = False
        for _ in self.selector.select(timeout=seconds):
            self._drain_wake()
            woken = True
        self._check_cancel()
        return woken

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 512):
                pass

    def run_attempts(self) -> tuple[JobStatus, str, str]:
        """Run the gang, restarting it while retries remain."""
        from ..monitor.recorder import start_job_recorder

        # GPU samples + alerts while it holds GPUs
        self.gpu_recorder = start_job_recorder(self.journal, self.files.dir, self.gpu_alloc)
        while True:
            failure = self.run_attempt()
            if failure is None:
                return JobStatus.SUCCEEDED, "", "Succeeded"
            if low_space(
                self.files.dir
            ):  # a rank that could not write its log; a retry cannot either
                raise DiskFull(failure)
            if failure.startswith("timed out"):
                return JobStatus.FAILED, failure, "DeadlineExceeded"
            if self.attempt > self.spec.max_retries:
                return JobStatus.FAILED, failure, "Failed"
            self.attempt += 1
            msg = f"{failure}; restarting the gang (attempt {self.attempt} of {self.spec.max_retries + 1})"
            self.store.update(
                self.name,
                attempt=self.attempt,
                message=msg,
                event=JobEvent(time.time(), "Restarting", msg, "warning"),
            )

    def run_attempt(self) -> str | None:
        """One attempt: start every rank, wait; None on success, else why it failed."""
        self.start_workers()
        try:
            return self.wait_workers()
        finally:
            self.stop_all("end of attempt")

    def world(self) -> contract.World:
        """Where this attempt's ranks meet: loopback, fresh ports."""
        n = self.spec.workers
        ports = free_ports(n + 1)
        return contract.World(
            workers=n,
            procs_per_worker=self.spec.procs_per_worker or 1,
            master_addr="127.0.0.1",
            master_port=ports[0],
            hosts=("127.0.0.1",) * n,
            ports=tuple(ports[1:]),
        )

    def start_workers(self) -> None:
        """Start every rank in its own process group, its output copied to its log file."""
        spec = self.spec
        world = self.world()
        hostfile = None
        if spec.framework == "mpi":
            hostfile = str(self.files.dir / "hostfile")
            Path(hostfile).write_text(contract.mpi_hostfile(world))
        base = os.environ.copy()
        base.update(spec.env)
        base.update(self.data_env)  # WORKBENCH_MOUNTS from staging
        bindir = os.path.dirname(sys.executable)
        base["PATH"] = bindir + os.pathsep + base.get("PATH", "")
        base["PYTHONUNBUFFERED"] = "1"
        base["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        cwd = spec.working_dir or str(self.files.dir)
        argv = list(spec.command)
        auto_spawn = (
            spec.framework == "pytorch" and world.procs_per_worker > 1 and not has_launcher(argv)
        )
        self.workers = []
        if self.copier is None:
            self.copier = LogCopier(self.files.dir)
        now = time.time()
        for rank in range(spec.workers):
            env = dict(base)
            env.update(
                contract.worker_env(
                    spec.framework or "plain",
                    world,
                    rank,
                    self.name,
                    self.attempt,
                    str(self.files.dir),
                    hostfile,
                )
            )
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in self.gpu_alloc[rank])
            log = self.files.open_log(rank, self.attempt)
            output = self.copier.pipe(rank, log.fileno())
            worker = Worker(rank)
            per_proc = (
                [
                    contract.pytorch_process_env(world, rank, lr)
                    for lr in range(world.procs_per_worker)
                ]
                if auto_spawn
                else [{}]
            )
            try:
                for extra in per_proc:
                    p = subprocess.Popen(
                        _container.rank_argv(self, argv, rank, len(worker.procs))
                        if self.runtime == "container"
                        else argv,
                        cwd=cwd,
                        env={**env, **extra},
                        stdin=subprocess.DEVNULL,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                        close_fds=True,
                        # One group per rank (the first process leads it) inside the
                        # supervisor's own session, so killpg reaches every process of it.
                        process_group=worker.pgid if worker.procs else 0,
                    )
                    if not worker.procs:
                        worker.pgid = p.pid
                    worker.procs.append(p)
                    self.selector.register(os.pidfd_open(p.pid), selectors.EVENT_READ, (worker, p))
            except OSError as e:
                os.close(output)
                log.write(f"[workbench] cannot start {argv[0]!r}: {e.strerror}\n".encode())
                log.close()
                self.workers.append(worker)
                raise LaunchFailed(
                    rank, f"rank {rank} could not start {argv[0]!r}: {e.strerror}"
                ) from e
            os.close(output)  # the rank's processes hold it now: EOF when they are all gone
            log.close()
            self.workers.append(worker)
            lead = worker.procs[0]
            self.store.set_rank(
                self.name,
                rank,
                state=RankState.RUNNING,
                # node: the wire's host of the rank (RankRecord.node), here this machine
                details={"pid": lead.pid, "ctime": process_ctime(lead.pid), "node": HOST},
                exit_code=None,
                started_at=now,
                finished_at=None,
                gpus=env["CUDA_VISIBLE_DEVICES"],
            )
        row = self.store.row(self.name) or {}
        started = row.get("started_at") or now
        if spec.timeout and self.deadline is None:
            self.deadline = started + spec.timeout
        ev = JobEvent(now, "Started", f"{spec.workers} worker(s) started, attempt {self.attempt}")
        self.store.update(self.name, status=JobStatus.RUNNING, started_at=started, event=ev)

    def wait_workers(self) -> str | None:
        """Wait for exits; the first non-zero exit fails the attempt."""
        while not all(w.done for w in self.workers):
            timeout = None if self.deadline is None else max(0.0, self.deadline - time.time())
            if timeout is not None and timeout <= 0:
                assert self.spec.timeout is not None
                return f"timed out after {human_duration(self.spec.timeout)}"
            # Also wake every few seconds to notice a cancel flag set without a signal.
            events = self.selector.select(timeout=min(timeout, 5.0) if timeout is not None else 5.0)
            for key, _ in events:
                if key.data is None:
                    self._drain_wake()
                    continue
                worker, proc = key.data
                self.selector.unregister(key.fd)
                os.close(key.fd)
                code = proc.wait()
                if code != 0:
                    self._rank_done(worker, RankState.FAILED, code)
                    return f"rank {worker.rank} {describe_exit(code)}"
                if all(p.returncode is not None for p in worker.procs):
                    self._rank_done(worker, RankState.SUCCEEDED, 0)
            self._check_cancel()
        return None

    def _rank_done(self, worker: Worker, state: RankState, code: int) -> None:
        worker.done = True
        self.store.set_rank(
            self.name, worker.rank, state=state, exit_code=code, finished_at=time.time()
        )
        if state is RankState.FAILED:
            msg = f"rank {worker.rank} {describe_exit(code)}"
            self.store.add_event(self.name, JobEvent(time.time(), "RankFailed", msg, "error"))

    def stop_all(self, why: str) -> None:
        """SIGTERM every rank's process group, SIGKILL what is left after the grace period."""
        groups = [w.pgid for w in self.workers if w.pgid]
        # A rank that already ended with an error (ranks failing together) failed by itself:
        # record it as Failed, not as Stopped by us, before anything is signalled.
        for w in self.workers:
            codes = [] if w.done else [p.poll() for p in w.procs]
            code = next((c for c in codes if c), None)
            if code:
                self._rank_done(w, RankState.FAILED, code)
        for w in self.workers:
            if not w.done:
                killpg(w.pgid, signal.SIGTERM)
        deadline = time.time() + self.stop_grace
        for w in self.workers:
            for p in w.procs:
                if p.returncode is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        p.wait(timeout=max(0.0, deadline - time.time()))
        # Kill whatever remains in the groups, finished ranks' stray children included.
        for g in groups:
            killpg(g, signal.SIGKILL)
        for w in self.workers:
            for p in w.procs:
                if p.returncode is None:
                    p.wait()
        # Every rank has its exit code now, so reaping any descendant is safe: descendants
        # that left their group or were orphaned were reparented to us (child subreaper).
        kill_and_reap_descendants()
        if self.copier is not None:  # the logs and metrics are whole before any status
            self.copier.drain()
        for w in self.workers:
            if not w.done:
                w.done = True
                code = w.procs[0].returncode if w.procs else None
                self.store.set_rank(
                    self.name,
                    w.rank,
                    state=RankState.STOPPED,
                    exit_code=code,
                    finished_at=time.time(),
                )
        for key in list(self.selector.get_map().values()):
            if key.data is not None:
                self.selector.unregister(key.fd)
                os.close(key.fd)
        self.workers = []
        if self.runtime == "container":  # a wrapper killed mid-way must not leak a container
            _container.supervisor_cleanup(self)


class LaunchFailed(Exception):
    """A rank's program could not be started at all."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(message)
        self.rank = rank


def _supervise(home: Path, name: str) -> int:
    become_subreaper()
    sup = Supervisor(home, name)
    sup.install_signals()
    sup.run()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``[--detach] HOME NAME``."""
    args = list(sys.argv[1:] if argv is None else argv)
    detach = "--detach" in args
    if detach:
        args.remove("--detach")
    home, name = Path(args[0]), args[1]
    if detach:
        pid = os.fork()
        if pid:
            print(pid, flush=True)
            os._exit(0)
        os.setsid()
        log = os.open(
            home / "jobs" / name / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(devnull)
        os.close(log)
    return _supervise(home, name)


if __name__ == "__main__":
    sys.exit(main())
