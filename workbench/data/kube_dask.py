"""A Dask cluster that runs as a workbench job on Kubernetes, for ``preprocess(...,
cluster=KubeDaskCluster(workers=2))``.

The job has ``workers + 1`` ranks running ``python -m workbench.data.dask_job``: rank 0 the
scheduler, the others workers (see dask_job.py). It is an ordinary job of the Kubernetes
backend, found through the backend registry: the same image, mounts, Secret and
placement as training, listed by ``workbench list``, cancelled by ``workbench cancel``.
This process is the Dask client: it connects to the scheduler at the job's master
address, a cluster DNS name (so it runs in the cluster, e.g. a notebook pod; from
outside, give ``scheduler_address`` after a ``kubectl port-forward``). Every wait has a
timeout and watches the job, so a job that fails or is cancelled is an error naming it,
never a hang.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import BackendError, SpecError
from ..settings import Settings
from ..spec import JobRecord, JobStatus, Mount, TrainSpec

POLL = 0.5


@dataclass
class KubeDaskCluster:
    """A Dask scheduler and ``workers`` workers as one job of the Kubernetes backend."""

    workers: int = 2
    image: str = "pytorch"  # must hold workbench and dask.distributed
    threads: int = 1  # per worker
    data: Sequence[str | Mount] = ()  # SRC:DST mounts, as --data takes them
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # secrets go to the Secret
    instance_spec: str | None = None
    cpu: float | None = None
    memory: str | None = None
    name: str | None = None
    backend_options: Mapping[str, Any] = field(default_factory=dict)  # namespace, flavor, context
    scheduler_address: str | None = None  # e.g. tcp://127.0.0.1:8786 after a port-forward
    start_timeout: float = 600.0  # for the scheduler and the workers to come up
    idle_timeout: float = 300.0  # the scheduler gives up after this long with no work
    settings: Settings | None = field(default=None, repr=False)
    backend: Any = field(default=None, repr=False)  # a Backend; default: the registry's
    record: JobRecord | None = field(default=None, init=False, repr=False)

    def spec(self) -> TrainSpec:
        """The job this cluster runs (validated by the backend on submit)."""
        if self.workers < 1:
            raise SpecError("workers", f"{self.workers} Dask workers", "give workers=1 or more")
        mounts = [m if isinstance(m, Mount) else Mount.parse(m) for m in self.data]
        command = ["python", "-m", "workbench.data.dask_job", "--threads", str(self.threads),
                   "--idle-timeout", f"{self.idle_timeout:g}",
                   "--connect-timeout", f"{self.start_timeout:g}"]  # fmt: skip
        return TrainSpec(
            command=command, name=self.name or f"preprocess-{uuid.uuid4().hex[:6]}",
            image=self.image, workers=self.workers + 1, instance_spec=self.instance_spec,
            cpu=self.cpu, memory=self.memory, data=mounts, env=dict(self.env),
            # The PyTorchJob-shaped contract: MASTER_ADDR/MASTER_PORT name rank 0.
            framework="pytorch", backend="kubernetes", backend_options=dict(self.backend_options),
        )  # fmt: skip

    def _backend(self) -> Any:
        if self.backend is None:
            # Looked up only now: workbench.data never imports a backend at import time.
            from ..backends import load_backend

            self.backend = load_backend("kubernetes", settings=self.settings or Settings.load())
        return self.backend

    @property
    def job(self) -> str:
        """The job's name (once started)."""
        if self.record is None:
            raise RuntimeError("the cluster has not started")
        return self.record.name

    def start(self) -> str:
        """Submit the job and wait for its scheduler; returns the address to connect to."""
        backend = self._backend()
        self.record = backend.submit(self.spec())
        deadline = time.monotonic() + self.start_timeout
        try:
            while True:
                record = self.check()
                if record.status is JobStatus.RUNNING:
                    break
                if time.monotonic() > deadline:
                    raise BackendError("kubernetes", f"preprocess job {self.job} did not start within "
                                       f"{self.start_timeout:g}s ({record.message or record.status.value}); "
                                       "it was cancelled")  # fmt: skip
                time.sleep(POLL)
        except BaseException:  # a timeout, or Ctrl-C while waiting: the job goes too
            self.close(cancel=True)
            raise
        if self.scheduler_address:
            return self.scheduler_address
        host, port = backend.master_address(self.job)
        return f"tcp://{host}:{port}"

    def check(self) -> JobRecord:
        """The job's record; BackendError (with its message and log tail) once it ended
        before the work was done."""
        record: JobRecord = self._backend().get(self.job)
        self.record = record
        if record.status.terminal:
            tail = ""
            try:
                tail = "\n".join(self._backend().log_tail(self.job, 0, 5))
            except Exception:  # the logs are a nicety here: the status says enough
                tail = ""
            why = record.message or record.status.value
            raise BackendError("kubernetes", f"preprocess job {self.job} ended {record.status.value} "
                               f"before the work was done: {why}" + (f"\n{tail}" if tail else ""))  # fmt: skip
        return record

    def wait_for_workers(self, client: Any) -> None:
        """Block until every worker joined (or the job ended, or start_timeout passed)."""
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                client.wait_for_workers(self.workers, timeout=2)
                return
            except TimeoutError:
                self.check()
                if time.monotonic() > deadline:
                    raise BackendError("kubernetes", f"preprocess job {self.job}: not all {self.workers} "
                                       f"worker(s) joined within {self.start_timeout:g}s") from None  # fmt: skip

    def finish(self, client: Any, timeout: float = 60.0) -> JobRecord:
        """The work is done: shut the scheduler down and wait for the job to Succeed."""
        from .dask_job import mark_done

        client.run_on_scheduler(mark_done)
        client.shutdown()
        record = self._backend().get(self.job)
        deadline = time.monotonic() + timeout
        while not record.status.terminal and time.monotonic() < deadline:
            time.sleep(POLL)
            record = self._backend().get(self.job)
        self.record = record
        if record.status is not JobStatus.SUCCEEDED:
            raise BackendError("kubernetes", f"preprocess job {self.job} ended "
                               f"{record.status.value} after the work was done: {record.message}")  # fmt: skip
        return record

    def lost(self, timeout: float = 30.0) -> None:
        """The client lost its scheduler: raise the job's end (check), or say so."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            time.sleep(POLL)
        raise BackendError("kubernetes", f"lost the Dask scheduler of job {self.job}, which still "
                           f"runs ({self.record.status.value if self.record else '?'})")  # fmt: skip

    def close(self, cancel: bool = True) -> None:
        """Cancel the job if it still runs (what an error or an interrupt does)."""
        if self.record is not None and cancel:
            record = self._backend().get(self.job)
            if not record.status.terminal:
                self._backend().cancel(self.job, wait=0)
