"""The interface every backend implements; surfaces only ever talk to this."""

from __future__ import annotations

import builtins
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..spec import JobRecord, TrainSpec

RANK_PREFIX = "[rank {rank}] "  # every-rank logs: one format for the CLI, magics and REST


def rank_prefixed(rank: int, line: str) -> str:
    """``line`` as it appears in an every-rank log stream (``logs(rank=None)``)."""
    return RANK_PREFIX.format(rank=rank) + line


def split_rank_prefix(line: str) -> tuple[int, str]:
    """The rank and the text of a line from an every-rank log stream."""
    head, _, text = line.partition("] ")
    return int(head.removeprefix("[rank ")), text


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


class Backend(ABC):
    """Runs TrainSpecs somewhere and reports on them."""

    name: str = "base"

    @abstractmethod
    def submit(self, spec: TrainSpec) -> JobRecord:
        """Start a validated spec; returns at once with the Pending record."""

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
    def nodes(self) -> builtins.list[dict[str, Any]]:
        """Hosts with their GPUs and what is allocated on them (for `top`)."""

    def capabilities(self) -> Capabilities:
        """What this backend can run here; a backend that does not say declares nothing."""
        return Capabilities()
