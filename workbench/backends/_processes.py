"""Process plumbing for the local supervisor: ports, launchers, process groups, reaping."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

import psutil

LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "mpirun", "mpiexec")


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def has_launcher(argv: list[str]) -> bool:
    """True when the command starts its own per-process launcher (torchrun, mpirun)."""
    head = argv[:4]
    return any(Path(a).name in LAUNCHERS or a in LAUNCHERS for a in head)


def become_subreaper() -> None:
    """Orphaned descendants of the job get reparented to the supervisor (Linux), so cancel
    can find and reap every one of them instead of leaving them to init."""
    import ctypes

    pr_set_child_subreaper = 36
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def kill_and_reap_descendants(timeout: float = 5.0) -> None:
    """SIGKILL every remaining descendant and reap them all (no zombie outlives the job)."""
    deadline = time.time() + timeout
    while True:
        children = psutil.Process().children(recursive=True)
        for c in children:
            with contextlib.suppress(psutil.Error):
                c.kill()
        reaped_any = False
        with contextlib.suppress(ChildProcessError):
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                reaped_any = True
        if not children and not reaped_any:
            return
        if time.time() > deadline:
            return
        time.sleep(0.01)


def killpg(pgid: int, sig: int) -> None:
    """Signal a process group; one already gone (or not ours) is not an error."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def process_ctime(pid: int) -> float | None:
    """When ``pid`` was created (to tell it from a later process with the same PID)."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def describe_exit(code: int) -> str:
    """'exited with code 3' / 'was killed by SIGTERM' for a Popen return code."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def human_duration(seconds: float) -> str:
    """2h, 30m, 45s: how a timeout was written."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def same_process(pid: int, ctime: float | None) -> bool:
    """True when ``pid`` still names the process created at ``ctime`` (guards PID reuse)."""
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return ctime is None or abs(p.create_time() - ctime) < 1.0
    except psutil.Error:
        return False


def job_processes(job_dir: str) -> list[psutil.Process]:
    """Every live process of the job whose folder is ``job_dir``: ranks carry
    WORKBENCH_JOB_DIR in their environment, and so does whatever they start, even children
    that left the rank's process group or session (setsid) or were reparented to init."""
    me = os.getpid()
    found = []
    for p in psutil.process_iter(["pid"]):
        if p.pid == me:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
            if p.environ().get("WORKBENCH_JOB_DIR") == job_dir:
                found.append(p)
        except (psutil.Error, OSError):  # gone, or another user's: not ours to read
            continue
    return found


def kill_job_processes(job_dir: str, pgids: list[int], timeout: float = 5.0) -> int:
    """SIGKILL the given process groups and every process of the job (by its environment);
    repeats until none is left, since a process may fork while we look. Returns how many."""
    for g in pgids:
        killpg(g, signal.SIGKILL)
    killed = 0
    deadline = time.time() + timeout
    while True:
        procs = job_processes(job_dir)
        if not procs:
            return killed
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.kill()
                killed += 1
        psutil.wait_procs(procs, timeout=0.5)
        if time.time() > deadline:
            return killed
