"""The in-container agent: ``python -m workbench.monitor.agent [OPTIONS] -- CMD ARGS...``.

It runs CMD as its child, forwards the child's output line by line, forwards signals
(SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1/2) to the child's process group, exits with
the child's exit code (128+N when the child died of signal N), and samples NVML for the
GPUs in CUDA_VISIBLE_DEVICES, writing metric records into its own stdout as single lines
that start with ``METRIC_PREFIX``. A backend picks them out of the job's log stream with
``split_metric_lines``, so any cluster works without Prometheus.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from .stream import METRIC_PREFIX, format_metric_line, split_metric_lines

__all__ = ["METRIC_PREFIX", "main", "split_metric_lines"]

FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


class LineWriter:
    """Writes the child's bytes unchanged and slips records in only at line boundaries."""

    def __init__(self, fd: int = 1, max_pending: int = 256) -> None:
        self.fd = fd
        self.lock = threading.Lock()
        self.at_line_start = True
        # Records wait here while the child is mid-line; the oldest go first when it never ends one.
        self.pending: collections.deque[str] = collections.deque(maxlen=max_pending)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except InterruptedError:  # pragma: no cover - PEP 475 retries for us
                continue
            except BrokenPipeError:
                return  # nobody reads our output any more; keep the child running
            view = view[n:]

    def user(self, chunk: bytes) -> None:
        """Forward child output; flush waiting records once it ends a line."""
        if not chunk:
            return
        with self.lock:
            self._write(chunk)
            self.at_line_start = chunk.endswith(b"\n")
            if self.at_line_start:
                self._drain()

    def record(self, record: dict[str, Any]) -> None:
        """Emit a metric record now if that cannot split a user line, else soon."""
        line = format_metric_line(record)
        with self.lock:
            self.pending.append(line)
            if self.at_line_start:
                self._drain()

    def _drain(self) -> None:
        while self.pending:
            self._write(self.pending.popleft().encode())

    def close(self) -> None:
        """End a dangling user line (so records stay whole lines) and write what waits."""
        with self.lock:
            if self.pending and not self.at_line_start:
                self._write(b"\n")
                self.at_line_start = True
            self._drain()


def visible_gpus(value: str | None) -> tuple[list[int] | None, str | None]:
    """NVML indices named by CUDA_VISIBLE_DEVICES: (None = all, reason when none)."""
    if value is None or value.strip().lower() == "all":
        return None, None  # containers usually see only their own GPUs
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items or items[0] in ("-1", "none", "void", "NoDevFiles"):
        return [], f"no GPUs are visible to this job (CUDA_VISIBLE_DEVICES={value!r})"
    indices: list[int] = []
    uuids: list[str] = []
    for item in items:
        if item.isdigit():
            indices.append(int(item))
        else:
            uuids.append(item)
    if uuids:
        from ..errors import MonitorUnavailableError
        from .inventory import gpu_inventory

        try:
            by_uuid = {g.uuid: g.index for g in gpu_inventory()}
        except MonitorUnavailableError as e:
            return [], e.reason
        for u in uuids:
            if u in by_uuid:
                indices.append(by_uuid[u])
    if not indices:
        return (
            [],
            f"CUDA_VISIBLE_DEVICES={value!r} names no GPU NVML can see (MIG slices are not sampled)",
        )
    return indices, None


class Agent:
    """One wrapped child and the sampler that reports on its GPUs."""

    def __init__(self, command: list[str], interval: float, emit_interval: float) -> None:
        self.command = command
        self.interval = interval
        self.emit_interval = emit_interval
        self.out = LineWriter()
        self.child: subprocess.Popen[bytes] | None = None
        self.base = {
            "v": 1,
            "host": socket.gethostname(),
            "rank": _rank(),
            "job": os.environ.get("WORKBENCH_JOB_NAME"),
        }
        self._last_emit = 0.0

    def _forward_signal(self, signum: int, frame: object) -> None:
        if self.child is not None and self.child.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.child.pid, signum)

    def run(self) -> int:
        """Start the child, forward output and signals, sample; returns the exit code."""
        for sig in FORWARDED:
            signal.signal(sig, self._forward_signal)
        try:
            # Its own process group: a terminal's Ctrl-C reaches only us, and we forward it
            # once to the whole group (torchrun's workers included).
            self.child = subprocess.Popen(self.command, stdout=subprocess.PIPE, process_group=0)
        except OSError as e:
            print(
                f"[workbench.monitor.agent] cannot start {self.command[0]!r}: {e.strerror}",
                file=sys.stderr,
            )
            return 127 if isinstance(e, FileNotFoundError) else 126
        assert self.child.stdout is not None
        # Helper threads inherit a mask that blocks the forwarded signals, so the kernel
        # delivers them to the main thread and interrupts its wait (else a signal taken by
        # a helper thread would leave the handler pending until the child exits).
        signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
        try:
            pump = threading.Thread(
                target=self._pump, args=(self.child.stdout.fileno(),), daemon=True
            )
            pump.start()
            sampler = self._start_sampler()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, FORWARDED)
        code = self._wait_child()
        pump.join(timeout=5.0)  # a grandchild may hold the pipe open; do not hang on it
        if sampler is not None:
            sampler.stop()
            self._emit_latest(sampler, force=True)
        self.out.close()
        return code if code >= 0 else 128 - code

    def _wait_child(self) -> int:
        """Wait for the child, waking at least once a second: Python runs signal handlers
        only in the main thread, and only once it wakes, whichever thread the kernel
        delivered the signal to."""
        assert self.child is not None
        try:
            pidfd = os.pidfd_open(self.child.pid)
        except (AttributeError, OSError):
            pidfd = None
        try:
            while self.child.poll() is None:
                if pidfd is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.child.wait(timeout=1.0)
                else:
                    select.select([pidfd], [], [], 1.0)
        finally:
            if pidfd is not None:
                os.close(pidfd)
        return int(self.child.returncode)

    def _pump(self, fd: int) -> None:
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            self.out.user(chunk)

    def _start_sampler(self) -> Any:
        from .sampler import HostSampler

        indices, reason = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"))
        if reason:
            self.out.record({**self.base, "kind": "monitor", "state": "no_gpu", "reason": reason})
            return None
        sampler = HostSampler(
            interval=self.interval, slow_interval=max(self.interval, 10.0),
            history_seconds=int(max(self.interval, 60)), indices=indices, watch_idle=True,
        )  # fmt: skip
        sampler.subscribe(lambda samples: self._emit_latest(sampler))
        sampler.subscribe_alerts(
            lambda a: self.out.record(
                {**self.base, "kind": "alert", "active": a.cleared is None, "alert": a.to_dict()}
            )
        )
        sampler.start()
        if sampler.state.value != "ok":
            self.out.record(
                {
                    **self.base,
                    "kind": "monitor",
                    "state": sampler.state.value,
                    "reason": sampler.reason,
                }
            )
            return None
        return sampler

    def _emit_latest(self, sampler: Any, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_emit < self.emit_interval:
            return
        self._last_emit = now
        samples = sampler.latest()
        if samples:
            self.out.record({**self.base, "kind": "gpu", "time": time.time(),
                             "samples": [s.to_dict() for s in samples]})  # fmt: skip


def _rank() -> int | None:
    for name in ("WORKBENCH_RANK", "RANK", "JOB_COMPLETION_INDEX"):
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the child's exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        print("usage: python -m workbench.monitor.agent [--interval S] [--emit-interval S] -- CMD [ARGS...]",
              file=sys.stderr)  # fmt: skip
        return 2
    split = args.index("--")
    parser = argparse.ArgumentParser(prog="python -m workbench.monitor.agent")
    parser.add_argument("--interval", type=float, default=float(os.environ.get("WORKBENCH_GPU_INTERVAL", "1")),
                        help="seconds between NVML samples (alerts are judged on each)")  # fmt: skip
    parser.add_argument("--emit-interval", type=float,
                        default=float(os.environ.get("WORKBENCH_AGENT_EMIT_INTERVAL", "10")),
                        help="seconds between GPU metric records written to the output")  # fmt: skip
    ns = parser.parse_args(args[:split])
    command = args[split + 1 :]
    if not command:
        parser.error("give the command to run after --")
    return Agent(command, ns.interval, ns.emit_interval).run()


if __name__ == "__main__":
    sys.exit(main())
