"""Reading a job's reported metrics back: training scalars (from ``workbench.run.log``)
and GPU samples (from the monitor), both kept in the job's folder so charts survive a
kernel or server restart.

Layout under JOB_DIR/metrics/: ``scalars-rank{N}.jsonl`` (one JSON object per line:
``{"time": t, "rank": r, "step": s, "total": n | null, "<name>": value, ...}``) and
``gpu.jsonl`` (one GpuSample dict per line, plus ``"rank"`` where known).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SCALARS_GLOB = "scalars-rank*.jsonl"
GPU_FILE = "gpu.jsonl"


def metrics_dir(job_dir: str | Path) -> Path:
    """Where a job's metric files live."""
    return Path(job_dir) / "metrics"


def read_jsonl(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """Records of a JSONL file, skipping a torn last line (the writer may be mid-line)."""
    if not path.exists():
        return []
    with open(path, "rb") as f:
        out = parse_records(raw for raw in f if raw.endswith(b"\n"))
    return out[-limit:] if limit else out


def parse_records(lines: Iterable[bytes]) -> list[dict[str, Any]]:
    """The JSON objects among whole lines; anything else (a stray write) is skipped."""
    out: list[dict[str, Any]] = []
    for raw in lines:
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def read_job_metrics(
    job_dir: str | Path, limit: int | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``{"scalars": [...], "gpu": [...]}`` for a job, oldest first."""
    d = metrics_dir(job_dir)
    scalars: list[dict[str, Any]] = []
    if d.is_dir():
        for path in sorted(d.glob(SCALARS_GLOB)):
            scalars.extend(read_jsonl(path))
    scalars.sort(key=lambda r: (r.get("time", 0), r.get("rank", 0)))
    if limit:
        scalars = scalars[-limit:]
    return {"scalars": scalars, "gpu": read_jsonl(d / GPU_FILE, limit)}
