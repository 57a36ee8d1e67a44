"""A job's reported metrics on disk: training scalars (``workbench.run.log``) and GPU
samples, written by the backend's log copier (``MetricSink``) and the host GPU recorder,
read back by the backend (``read_job_metrics``) for ``JobManager.metrics``.

Layout under JOB_DIR/metrics/: ``scalars-rank{N}.jsonl`` (one JSON object per line:
``{"time": t, "rank": r, "step": s, "total": n | null, "<name>": value, ...}``),
``gpu.jsonl`` (one GpuSample dict per line, plus ``"rank"`` where known) and
``agent-rank{N}.jsonl`` (the in-container agent's other records: monitor state, alerts).
Surfaces never read these paths: they ask the manager, so a backend whose ranks run on
other nodes can keep its metrics elsewhere.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import SpecError
from .stream import scalars_line

SCALARS_GLOB = "scalars-rank*.jsonl"
GPU_FILE = "gpu.jsonl"
# An incremental read (``since``) takes at most this much of one file per call; a file
# that grew more than MAX_BACKLOG since is skipped ahead to its last READ_CHUNK, so a
# chart shows a sample of a flood rather than a poll reading all of it.
MAX_BACKLOG = 4 * 1024 * 1024
READ_CHUNK = 1024 * 1024
_CURSOR_ITEM = re.compile(r"([A-Za-z0-9_.-]+\.jsonl)=(\d+)")


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


class MetricSink:
    """Appends the records a log copier split off one rank's output to the job's files:
    ``kind: scalars`` (run.log) to scalars-rank{R}.jsonl, the agent's ``kind: gpu``
    samples to gpu.jsonl, its other records to agent-rank{R}.jsonl. One write per file
    per batch (O_APPEND), so a reader never sees a torn line between whole batches."""

    def __init__(self, job_dir: str | Path, rank: int) -> None:
        self.dir = metrics_dir(job_dir)
        self.rank = rank
        self._fds: dict[str, int] = {}

    def write(self, records: list[dict[str, Any] | bytes]) -> None:
        """Route and append ``records`` (dicts, or raw run.log frames as
        ``MetricByteSplitter.split_frames`` gives them); errors are swallowed: metrics
        never stop a job."""
        if not records:
            return
        lines: dict[str, list[bytes]] = {}
        own = f"scalars-rank{self.rank}.jsonl"
        for record in records:
            if isinstance(record, bytes):  # this rank's run.log: appended as it came
                lines.setdefault(own, []).append(scalars_line(record))
                continue
            for file, line in self._route(record):
                lines.setdefault(file, []).append(line.encode())
        for file, batch in lines.items():
            with contextlib.suppress(OSError):
                data = b"".join(batch)
                fd = self._fd(file)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]

    def _route(self, record: dict[str, Any]) -> list[tuple[str, str]]:
        rank = record.get("rank")
        rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else self.rank
        kind = record.get("kind")
        if kind == "scalars":
            body = {k: v for k, v in record.items() if k != "kind"}
            return [(f"scalars-rank{rank}.jsonl", _line(body))]
        if kind == "gpu" and isinstance(record.get("samples"), list):
            when = record.get("time")
            return [
                (GPU_FILE, _line({"time": when, **s, "rank": rank}))
                for s in record["samples"]
                if isinstance(s, dict)
            ]
        return [(f"agent-rank{rank}.jsonl", _line(record))]

    def _fd(self, file: str) -> int:
        fd = self._fds.get(file)
        if fd is None:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.dir / file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._fds[file] = fd
        return fd

    def close(self) -> None:
        """Close the files this sink opened."""
        for fd in self._fds.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds.clear()


def _line(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), default=str) + "\n"


def parse_cursor(since: str) -> dict[str, int]:
    """File -> byte offset from a cursor ``read_job_metrics`` returned ("" = the start)."""
    offsets: dict[str, int] = {}
    for item in filter(None, since.split(",")):
        m = _CURSOR_ITEM.fullmatch(item)
        if m is None:
            raise SpecError(
                "since",
                f"not a metrics cursor: {since[:80]!r}",
                "pass the cursor of the last answer, or omit it",
            )
        offsets[m.group(1)] = int(m.group(2))
    return offsets


def _read_from(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Whole new lines of ``path`` from ``offset`` (bounded); returns records and new offset."""
    try:
        size = os.path.getsize(path)
    except OSError:
        return [], offset
    if size < offset:  # truncated or replaced (the GPU file is thinned): start over
        offset = 0
    skip_partial = size - offset > MAX_BACKLOG
    if skip_partial:
        offset = size - READ_CHUNK
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(min(size - offset, READ_CHUNK))
    if skip_partial:
        cut = data.find(b"\n")
        if cut < 0:
            return [], offset
        offset += cut + 1
        data = data[cut + 1 :]
    end = data.rfind(b"\n")
    if end < 0:
        return [], offset
    return parse_records(data[: end + 1].splitlines()), offset + end + 1


def read_job_metrics(
    job_dir: str | Path, limit: int | None = None, since: str | None = None
) -> dict[str, Any]:
    """``{"scalars": [...], "gpu": [...], "cursor": str}`` for a job, oldest first.

    Without ``since`` every record is read (``limit`` keeps the newest of each series).
    With ``since`` (a previous answer's cursor; "" for the start) only what was appended
    after it, at a bounded cost per file, so a live view's poll costs the new records.
    """
    d = metrics_dir(job_dir)
    files = sorted(p.name for p in d.glob(SCALARS_GLOB)) if d.is_dir() else []
    offsets = parse_cursor(since) if since is not None else None
    scalars: list[dict[str, Any]] = []
    gpu: list[dict[str, Any]] = []
    cursor: dict[str, int] = {}
    for name in [*files, GPU_FILE]:
        path = d / name
        if offsets is None:
            got, cursor[name] = _read_all(path)
        else:
            got, cursor[name] = _read_from(path, offsets.get(name, 0))
        (gpu if name == GPU_FILE else scalars).extend(got)
    scalars.sort(key=lambda r: (r.get("time") or 0, r.get("rank") or 0))
    if limit:
        scalars, gpu = scalars[-limit:], gpu[-limit:]
    text = ",".join(f"{k}={v}" for k, v in cursor.items() if v)
    return {"scalars": scalars, "gpu": gpu, "cursor": text}


def _read_all(path: Path) -> tuple[list[dict[str, Any]], int]:
    """Every whole line of ``path``, and the offset just after the last one."""
    try:
        data = path.read_bytes()
    except OSError:
        return [], 0
    end = data.rfind(b"\n") + 1
    return parse_records(data[:end].splitlines()), end
