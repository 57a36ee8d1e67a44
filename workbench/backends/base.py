"""The interface every backend implements; surfaces only ever talk to this."""

from __future__ import annotations

import builtins
import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from ..errors import SpecError
from ..plan import Plan
from ..spec import JobRecord, TrainSpec

RANK_PREFIX = "[rank {rank}] "  # every-rank logs: one format for the CLI, magics and REST


def rank_prefixed(rank: int, line: str) -> str:
    """``line`` as it appears in an every-rank log stream (``logs(rank=None)``)."""
    return RANK_PREFIX.format(rank=rank) + line


def split_rank_prefix(line: str) -> tuple[int, str]:
    """The rank and the text of a line from an every-rank log stream."""
    head, _, text = line.partition("] ")
    return int(head.removeprefix("[rank ")), text


def new_job_name(command: builtins.list[str], taken: Callable[[str], bool]) -> str:
    """A fresh job name from the script's name plus a random suffix (``train-3f9a2``):
    lower case, dashes, a letter first (a DNS-1035 label, so every backend can use it as an
    object name), and not ``taken``."""
    stem = "job"
    for arg in command:
        if arg.endswith((".py", ".sh")):
            stem = PurePath(arg).stem
            break
    stem = "".join(c if c.isalnum() else "-" for c in stem.lower()).strip("-")[:40] or "job"
    if not stem[0].isalpha():
        stem = f"job-{stem}"[:40]
    while True:
        name = f"{stem}-{secrets.token_hex(3)[:5]}"
        if not taken(name):
            return name


@dataclass(frozen=True)
class Capabilities:
    """What a backend can run, for surfaces to offer only that (GET /workbench/api/backends)."""

    runtimes: tuple[str, ...] = ()  # how ranks run: process, container (local); pod
    gpu_modes: tuple[str, ...] = ()  # "whole" GPUs, "fractional" (ranks share one)
    data_schemes: tuple[str, ...] = ()  # URL schemes a --data/--outputs mount may use
    flavours: tuple[str, ...] = ()  # kinds of workload: a container engine, a Kubeflow kind

    def to_dict(self) -> dict[str, list[str]]:
        """Wire form (workbench.wireschema.Capabilities)."""
        return {
            "runtimes": list(self.runtimes),
            "gpu_modes": list(self.gpu_modes),
            "data_schemes": list(self.data_schemes),
            "flavours": list(self.flavours),
        }


@dataclass(frozen=True)
class GpuHolder:
    """A rank that holds (a share of) a GPU."""

    job: str
    rank: int
    share: float  # 1.0 for a whole GPU, the fraction otherwise

    def to_dict(self) -> dict[str, Any]:
        """Wire form (workbench.wireschema.GpuHolder)."""
        return {"job": self.job, "rank": self.rank, "share": self.share}


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of a node, what is allocated on it, and its latest live figures."""

    index: int
    name: str
    memory_total: int  # bytes
    uuid: str | None = None
    allocated: float = 0.0  # GPUs' worth held by jobs (1.0 = all of it)
    holders: tuple[GpuHolder, ...] = ()
    utilization: float | None = None  # percent; None where unknown
    memory_used: float | None = None  # bytes
    temperature: float | None = None  # degrees C

    def to_dict(self) -> dict[str, Any]:
        """Wire form (workbench.wireschema.GpuInfo)."""
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "memory_total": self.memory_total,
            "allocated": self.allocated,
            "holders": [h.to_dict() for h in self.holders],
            "utilization": self.utilization,
            "memory_used": self.memory_used,
            "temperature": self.temperature,
        }


@dataclass(frozen=True)
class NodeJob:
    """A job active on a node."""

    name: str
    status: str
    gpus_total: float  # GPUs in the whole job (gpus_per_worker x workers)

    def to_dict(self) -> dict[str, Any]:
        """Wire form (workbench._wire_types.NodeJob)."""
        return {"name": self.name, "status": self.status, "gpus_total": self.gpus_total}


@dataclass(frozen=True)
class NodeInfo:
    """A host (local) or cluster node: its CPUs, memory, GPUs and the jobs on it."""

    name: str
    backend: str
    cpu_count: int | None = None
    memory_total: int | None = None  # bytes
    gpus: tuple[GpuInfo, ...] = ()
    gpu_reason: str | None = None  # why there are no GPUs (no driver, NVML missing)
    active_jobs: tuple[NodeJob, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)  # node labels (Kubernetes)

    def to_dict(self) -> dict[str, Any]:
        """Wire form (workbench.wireschema.NodeInfo), what `top` and GET /nodes show."""
        return {
            "name": self.name,
            "backend": self.backend,
            "cpu_count": self.cpu_count,
            "memory_total": self.memory_total,
            "gpus": [g.to_dict() for g in self.gpus],
            "gpu_reason": self.gpu_reason,
            "active_jobs": [j.to_dict() for j in self.active_jobs],
            "labels": dict(self.labels),
        }


class Backend(ABC):
    """Runs TrainSpecs somewhere and reports on them.

    The change feed: surfaces never poll a backend for news. They follow the store's change
    feed (``JobManager.changes``/``watch``), which SQLite triggers fill on every write to a
    job, its ranks or its events, from any process. So a backend reports a change by
    writing it into the store (``JobStore.update``, ``set_rank``, ``add_event``,
    ``finish_if_active``), and that is all: the local supervisor does so as its ranks
    move; a backend that learns state from outside (a Kubernetes watch thread, a cloud
    API) writes what it learns the same way, with ``details`` for its own state (pod
    names, resourceVersion). A state that only exists outside the store is invisible.
    """

    name: str = "base"
    # backend_options this backend accepts: name -> what it does (validate_options lists them).
    options: dict[str, str] = {}

    @abstractmethod
    def admit(self, spec: TrainSpec) -> Plan:
        """Every check and the placement decision for ``spec``, with no side effects: no
        job object, row, folder or name reservation (the name is settled at launch)."""

    @abstractmethod
    def launch(self, plan: Plan) -> JobRecord:
        """Carry out an admitted plan; returns at once with the record as it is then:
        Pending, or already Running where the ranks started that quickly."""

    def submit(self, spec: TrainSpec) -> JobRecord:
        """Admit and launch ``spec``; returns at once with the record (see launch)."""
        return self.launch(self.admit(spec))

    def validate_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """Check ``spec.backend_options`` against what this backend accepts; returns them.

        The default refuses every key this backend does not declare in ``options``; a backend
        with options checks their values too (overriding, then calling this).
        """
        for key in options:
            if key not in self.options:
                valid = ", ".join(sorted(self.options)) or "none"
                raise SpecError(
                    f"backend_options.{key}",
                    f"is not an option of the {self.name} backend",
                    f"valid options: {valid}",
                )
        return dict(options)

    @abstractmethod
    def get(self, name: str) -> JobRecord:
        """The current record; raises JobNotFoundError."""

    @abstractmethod
    def cancel(self, name: str, wait: float = 30.0) -> JobRecord:
        """Stop every process of the job; ``wait <= 0`` returns at once after asking (the
        backend finishes the stop on its own), else returns once the job is terminal."""

    def reconcile(self) -> int:
        """Bring records of jobs whose runner died up to date; how many changed (cheap)."""
        return 0

    @abstractmethod
    def logs(
        self,
        name: str,
        rank: int | None = 0,
        follow: bool = False,
        tail: int | None = None,
        stop: threading.Event | None = None,
    ) -> Iterator[str]:
        """Lines (without newline) of one rank's output, or every rank's with ``rank=None``.

        Every rank: each line starts with ``[rank R] `` (``rank_prefixed``), and
        ``tail`` counts per rank. Follow goes on until the job ends or ``stop`` is set, which
        the reader checks at least once per block it reads.
        """

    def log_tail(self, name: str, rank: int, lines: int) -> builtins.list[str]:
        """The last ``lines`` displayed lines of one rank, at a bounded cost (live views).

        Backends that can read a log from its end override this; the default takes the tail.
        """
        return builtins.list(self.logs(name, rank=rank, tail=lines))

    def metrics(
        self, name: str, limit: int | None = None, since: str | None = None
    ) -> dict[str, Any]:
        """``{"scalars": [...], "gpu": [...], "cursor": str}``: what the job's ranks reported
        (run.log records and GPU samples, split off their output streams), oldest first.

        ``limit`` keeps the newest N of each series. ``since`` is the cursor of an earlier
        answer ("" for the start): then only what came after it, at a bounded cost per
        call, so a live view's poll costs the new records. Backends that keep no metrics
        answer empty series.
        """
        self.get(name)  # JobNotFoundError for an unknown job
        return {"scalars": [], "gpu": [], "cursor": since or ""}

    @abstractmethod
    def delete(self, name: str) -> None:
        """Forget a finished job and its files."""

    @abstractmethod
    def rerun_spec(self, name: str) -> TrainSpec:
        """The exact spec (snapshot paths, credentials) to run ``name`` again."""

    @abstractmethod
    def nodes(self) -> builtins.list[NodeInfo]:
        """Hosts (nodes) with their GPUs and what is allocated on them (for `top`)."""

    def capabilities(self) -> Capabilities:
        """What this backend can run here; a backend that does not say declares nothing."""
        return Capabilities()
