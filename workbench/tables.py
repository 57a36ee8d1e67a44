"""Text forms of jobs and hosts shared by every text surface (CLI, magics, widgets, API).

Plain fixed-width columns: a table here is seven lines, so no table library is pulled in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .spec import JobRecord

if TYPE_CHECKING:  # tables stay importable without the backends package loaded
    from .backends.base import GpuInfo, NodeInfo

__all__ = [
    "TOP_GPU_COLUMNS",
    "describe",
    "format_duration",
    "gpu_figures",
    "jobs_table",
    "table",
    "top_text",
]

TOP_GPU_COLUMNS = ("GPU", "NAME", "MEMORY", "UTIL", "MEM USED", "TEMP", "ALLOCATED", "JOBS")


def format_duration(seconds: float) -> str:
    """1h02m, 3m04s, 12s."""
    s = int(seconds)
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def describe(r: JobRecord) -> str:
    """A short human text form of a job, for terminals and plain-text outputs."""
    ranks = ", ".join(
        f"{x.rank}:{x.state.value}" + (f"({x.exit_code})" if x.exit_code not in (None, 0) else "")
        for x in r.ranks
    )
    line = (
        f"Job {r.name}: {r.status.value} | {r.workers} worker(s) | attempt {r.attempt} | "
        f"{format_duration(r.elapsed())} | ${r.cost():.4f}"
    )
    if ranks:
        line += f" | ranks {ranks}"
    if r.message:
        line += f"\n  {r.message}"
    return line


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart, headers first, no trailing blanks."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    lines = [
        "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=False)).rstrip()
        for r in [headers, *rows]
    ]
    return "\n".join(lines)


def jobs_table(records: Sequence[JobRecord], wide: bool = False) -> str:
    """The `list` table (NAME STATUS WORKERS GPUS(TOTAL) AGE COST [ATTEMPT BACKEND MESSAGE])."""
    if not records:
        return "No jobs. Submit one with `workbench submit -- python train.py`."
    headers: tuple[str, ...] = ("NAME", "STATUS", "WORKERS", "GPUS(TOTAL)", "AGE", "COST")
    if wide:
        headers += ("ATTEMPT", "BACKEND", "MESSAGE")
    rows = []
    for r in records:
        row: tuple[str, ...] = (
            r.name,
            r.status.value,
            str(r.workers),
            f"{r.gpus_total:g}",
            format_duration(time.time() - r.created_at),
            f"${r.cost():.4f}",
        )
        if wide:
            row += (str(r.attempt), r.backend, r.message[:60])
        rows.append(row)
    return table(headers, rows)


def top_text(nodes: Sequence[NodeInfo]) -> str:
    """`top node`: per host its CPUs and memory, a row per GPU, and the active jobs."""
    out = []
    for n in nodes:
        memory = "?" if n.memory_total is None else f"{n.memory_total / 2**30:.1f}"
        out.append(f"Host {n.name} ({n.backend}): {n.cpu_count or '?'} vCPU, {memory} GiB memory")
        if n.gpu_reason:
            out.append(f"  GPUs: none - {n.gpu_reason}")
        else:
            rows = []
            for g in n.gpus:
                holders = ", ".join(f"{h.job}/{h.rank}" + (f" ({h.share:g})" if h.share < 1 else "")
                                    for h in g.holders) or "-"  # fmt: skip
                rows.append(
                    (
                        str(g.index),
                        g.name,
                        f"{g.memory_total / 2**30:.0f} GiB",
                        *gpu_figures(g),
                        f"{g.allocated:g}",
                        holders,
                    )
                )
            out += ["  " + ln for ln in table(TOP_GPU_COLUMNS, rows).splitlines()]
            if any(h.share < 1 for g in n.gpus for h in g.holders):  # shared GPUs (a cluster's)
                total = sum(g.memory_total for g in n.gpus)
                held = sum(g.allocated * g.memory_total for g in n.gpus)
                out.append(f"  GPU shares: {held / 2**30:.1f} of {total / 2**30:.1f} GiB GPU "
                           f"memory held, {sum(g.allocated for g in n.gpus):g} of {len(n.gpus)} GPUs")  # fmt: skip
        jobs = n.active_jobs
        out.append(
            f"  Active jobs: {len(jobs)}"
            + (": " + ", ".join(f"{j.name} ({j.status})" for j in jobs) if jobs else "")
        )
    return "\n".join(out)


def gpu_figures(g: GpuInfo) -> tuple[str, str, str]:
    """Live utilisation, memory used and temperature of one GPU for `top` ("-" if unknown)."""
    util, used, temp = g.utilization, g.memory_used, g.temperature
    return (
        "-" if util is None else f"{util:.0f}%",
        "-" if used is None else f"{used / 2**30:.1f} GiB",
        "-" if temp is None else f"{temp:.0f} C",
    )
