"""What a backend would do with a spec: the Plan that ``Backend.admit`` returns.

``admit`` runs every check and makes the placement decision without creating anything;
``launch`` carries the plan out. The same plan is what ``--dry-run`` prints, so what a
user previews is what runs. Standard library only (a core layer).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from .redaction import redact_url, redact_urls
from .spec import TrainSpec


@dataclass(frozen=True)
class Placement:
    """Where one rank runs: its node (host) and the GPUs it gets, if known now."""

    rank: int
    node: str | None = None
    gpu_devices: str | None = None  # the CUDA_VISIBLE_DEVICES it would get; None: no GPUs

    def to_dict(self) -> dict[str, Any]:
        """Wire form (workbench.wireschema.Placement)."""
        return {"rank": self.rank, "node": self.node, "gpu_devices": self.gpu_devices}


@dataclass
class Plan:
    """A spec that passed every check of one backend, and how that backend would run it.

    ``spec`` is the real spec (credentials included, for ``launch``): it is never shown,
    compared or written by ``to_dict``. ``backend_state`` carries what the backend worked out
    in ``admit`` and needs again in ``launch`` (the local container plan, say).
    """

    backend: str
    name: str
    spec: TrainSpec = field(repr=False, compare=False)
    runtime: str = "process"
    image: str = ""
    price_per_hour: float = 0.0
    placement: list[Placement] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    manifests: list[dict[str, Any]] = field(default_factory=list)  # Kubernetes fills it
    backend_state: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def workers(self) -> int:
        """Workers (nodes) of the job."""
        return int(self.spec.workers)

    @property
    def procs_per_worker(self) -> int:
        """Processes per worker."""
        return int(self.spec.procs_per_worker or 1)

    @property
    def gpus_per_worker(self) -> float:
        """GPUs each worker asks for (a fraction shares one)."""
        return float(self.spec.gpus)

    def mounts(self) -> list[dict[str, str]]:
        """Data and output mounts, credentials in the source masked."""
        return [
            {"source": redact_url(m.src), "target": m.dst, "mode": m.mode}
            for m in [*self.spec.data, *self.spec.outputs]
        ]

    def env_names(self) -> list[str]:
        """Names of the env variables the user set (never their values: some are secrets)."""
        return sorted(self.spec.env)

    def command(self) -> list[str]:
        """The program and its arguments, URLs in them with credentials masked (for display)."""
        return [redact_urls(a) for a in self.spec.command]

    def to_dict(self) -> dict[str, Any]:
        """Wire form (workbench.wireschema.Plan): nothing secret is in it."""
        return {
            "backend": self.backend,
            "name": self.name,
            "runtime": self.runtime,
            "image": self.image,
            "workers": self.workers,
            "procs_per_worker": self.procs_per_worker,
            "gpus_per_worker": self.gpus_per_worker,
            "placement": [p.to_dict() for p in self.placement],
            "mounts": self.mounts(),
            "env_names": self.env_names(),
            "price_per_hour": self.price_per_hour,
            "warnings": list(self.warnings),
            "manifests": [dict(m) for m in self.manifests],
        }

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """IPython's display (``%gpu_train --dry-run``): the text of :meth:`describe`."""
        p.text(self.describe())

    def describe(self) -> str:
        """The plan as a few lines of text (``workbench submit --dry-run``)."""
        gpus = f"{self.gpus_per_worker:g} GPU(s) per worker" if self.gpus_per_worker else "no GPUs"
        lines = [
            f"Dry run: nothing was created. Job {self.name} would run on {self.backend}:",
            f"  Runtime:    {self.runtime}",
            f"  Image:      {self.image}",
            f"  Command:    {shlex.join(self.command())}",
            f"  Workers:    {self.workers} x {self.procs_per_worker} process(es), {gpus}",
            f"  Price:      ${self.price_per_hour:.2f}/h per worker",
        ]
        for p in self.placement:
            where = p.node or "(decided at launch)"
            gpu = f", GPUs {p.gpu_devices}" if p.gpu_devices else ""
            lines.append(f"  Rank {p.rank}:     {where}{gpu}")
        for m in self.mounts():
            lines.append(f"  Mount:      {m['source']} -> {m['target']} ({m['mode']})")
        if self.spec.env:
            lines.append(f"  Env:        {', '.join(self.env_names())} (values not shown)")
        if self.spec.backend_options:
            opts = ", ".join(f"{k}={v}" for k, v in sorted(self.spec.backend_options.items()))
            lines.append(f"  Options:    {opts}")
        lines += [f"  Warning:    {w}" for w in self.warnings]
        lines += [f"  Manifest:   {m.get('kind', '?')} {m.get('metadata', {}).get('name', '')}"
                  for m in self.manifests]  # fmt: skip
        return "\n".join(lines)
