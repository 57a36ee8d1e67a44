"""Per-job GPU metrics for local jobs: the supervisor runs one recorder while the job lives.

The recorder samples only the job's GPUs, appends samples (with the rank that holds each
GPU and the rank of each GPU process) to JOB_DIR/metrics/gpu.jsonl, and records alerts
as job events, so charts and alerts survive a kernel or server restart.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from ..metrics import GPU_FILE, metrics_dir
from ..spec import JobEvent
from .alerts import Alert
from .sampler import GpuSample, HostSampler, MonitorState

# Beyond this size the older half of gpu.jsonl is thinned to every other sample.
MAX_FILE_BYTES = 64 * 2**20


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, "") or default)
    except ValueError:
        return default


class JobGpuRecorder:
    """Samples a job's GPUs into its folder and turns alerts into job events."""

    def __init__(self, store: Any, name: str, job_dir: Path, gpu_alloc: list[list[int]]) -> None:
        self.store = store
        self.name = name
        self.path = metrics_dir(job_dir) / GPU_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.ranks_of: dict[int, list[int]] = {}
        for rank, indices in enumerate(gpu_alloc):
            for i in indices:
                self.ranks_of.setdefault(i, []).append(rank)
        interval = _env_float("WORKBENCH_GPU_INTERVAL", 1.0)
        self.write_interval = _env_float("WORKBENCH_GPU_RECORD_INTERVAL", 5.0)
        self.max_bytes = int(_env_float("WORKBENCH_GPU_RECORD_MAX_BYTES", MAX_FILE_BYTES))
        self.sampler = HostSampler(
            interval=interval, slow_interval=_env_float("WORKBENCH_GPU_SLOW_INTERVAL", 10.0),
            history_seconds=int(max(60, interval)), indices=sorted(self.ranks_of), watch_idle=True,
        )  # fmt: skip
        self._last_write = 0.0
        self._rank_pids: dict[int, int] = {}
        self._lock = threading.Lock()

    def start(self) -> bool:
        """Begin sampling; False (and a job event saying why) when monitoring is off."""
        self.sampler.subscribe(self._on_samples)
        self.sampler.subscribe_alerts(self._on_alert)
        self.sampler.start()
        if self.sampler.state is not MonitorState.OK:
            msg = f"GPU metrics are off for this job: {self.sampler.reason}"
            self.store.add_event(self.name, JobEvent(time.time(), "GpuMonitorOff", msg, "warning"))
            return False
        return True

    def stop(self) -> None:
        """Stop sampling and write one last sample so the file ends at the job's end."""
        self.sampler.stop()
        latest = self.sampler.latest()
        if latest:
            self._write(latest)

    def _on_samples(self, samples: list[GpuSample]) -> None:
        now = time.monotonic()
        if now - self._last_write >= self.write_interval:
            self._last_write = now
            self._write(samples)

    def _write(self, samples: list[GpuSample]) -> None:
        with self._lock:
            rank_pids = self._current_rank_pids()
            lines = []
            for s in samples:
                d = s.to_dict()
                ranks = self.ranks_of.get(s.index, [])
                d["rank"] = ranks[0] if len(ranks) == 1 else ranks
                if d["processes"]:
                    d["processes"] = [
                        {**p, "rank": _rank_of(p["pid"], rank_pids)} for p in d["processes"]
                    ]
                lines.append(json.dumps(d, separators=(",", ":")) + "\n")
            with open(self.path, "a") as f:
                f.write("".join(lines))
                size = f.tell()
            if size > self.max_bytes:
                _thin(self.path)

    def _current_rank_pids(self) -> dict[int, int]:
        """Lead pid of each running rank (a rank restarts with a new pid on a retry)."""
        try:
            rows = self.store.rank_rows(self.name)
        except Exception:  # the store is busy or gone: keep the last known pids
            return self._rank_pids
        self._rank_pids = {r["details"]["pid"]: r["rank"] for r in rows if r["details"].get("pid")}
        return self._rank_pids

    def _on_alert(self, alert: Alert) -> None:
        if alert.cleared is None:
            ev = JobEvent(alert.since, f"GpuAlert:{alert.kind}", alert.message, alert.level)
        else:
            ev = JobEvent(
                alert.cleared, f"GpuAlertCleared:{alert.kind}", f"cleared: {alert.message}"
            )
        self.store.add_event(self.name, ev)


def _rank_of(pid: int, rank_pids: dict[int, int]) -> int | None:
    """The rank whose lead process is ``pid`` or one of its ancestors."""
    if pid in rank_pids:
        return rank_pids[pid]
    try:
        for parent in psutil.Process(pid).parents():
            if parent.pid in rank_pids:
                return rank_pids[parent.pid]
    except psutil.Error:
        pass
    return None


def _thin(path: Path) -> None:
    """Halve the older half of the file (keep every other line); atomic for readers."""
    lines = path.read_text().splitlines(keepends=True)
    half = len(lines) // 2
    kept, rounds, last = [], 0, None
    for line in lines[:half]:  # one round = the lines of one sampling time (every GPU)
        try:
            t = json.loads(line).get("time")
        except ValueError:
            continue
        if t != last:
            rounds, last = rounds + 1, t
        if rounds % 2:
            kept.append(line)
    kept += lines[half:]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(kept))
    os.replace(tmp, path)


def start_job_recorder(supervisor: Any) -> JobGpuRecorder | None:
    """Called by the local supervisor once the job holds GPUs; None for CPU jobs."""
    if supervisor.spec.gpus <= 0 or not any(supervisor.gpu_alloc):
        return None
    recorder = JobGpuRecorder(
        supervisor.store, supervisor.name, supervisor.files.dir, supervisor.gpu_alloc
    )
    return recorder if recorder.start() else None


def stop_job_recorder(supervisor: Any) -> None:
    """Called by the local supervisor as the job ends; safe when no recorder runs."""
    recorder = getattr(supervisor, "gpu_recorder", None)
    if recorder is not None:
        supervisor.gpu_recorder = None
        recorder.stop()
