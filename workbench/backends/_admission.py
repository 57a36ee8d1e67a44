"""The local backend's admission checks (what ``LocalBackend.admit`` runs before anything
is created): program and script, GPUs, the container engine, and where ranks would run."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

from ..errors import BackendUnavailableError, MonitorUnavailableError, SpecError, SubmitError
from ..plan import Placement
from ..spec import TrainSpec
from ..store import JobStore
from . import _placement
from ._container_engine import ContainerPlan, plan_job

# Interpreter options that take no value; -W and -X take one; -m, -c and - run no file.
_PY_FLAGS = {"-u", "-O", "-OO", "-B", "-E", "-s", "-S", "-I", "-b", "-bb", "-q", "-v", "-d", "-P"}
_SH_FLAGS = {"-e", "-x", "-u", "-v", "-eu", "-ex", "-eux", "-o"}


def script_arg(command: list[str]) -> str | None:
    """The script file a ``python``/``bash`` command runs, or None (``-m``, ``-c``, other)."""
    prog = Path(command[0]).name
    if prog.startswith("python"):
        flags, valued = _PY_FLAGS, {"-W", "-X"}
    elif prog in ("bash", "sh"):
        flags, valued = _SH_FLAGS - {"-o"}, {"-o"}
    else:
        return None
    args = iter(command[1:])
    for arg in args:
        if arg in flags:
            continue
        if arg in valued:
            next(args, None)
            continue
        return None if arg.startswith("-") else arg
    return None


def check_program(spec: TrainSpec) -> None:
    """The program exists (on PATH or at its path), and so does the script it runs."""
    prog = spec.command[0]
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    if os.sep in prog:
        target = Path(prog) if Path(prog).is_absolute() else Path(spec.working_dir or ".") / prog
        if not target.exists():
            raise SpecError(
                "command", f"{prog!r} does not exist in {spec.working_dir}", "check the path"
            )
    elif shutil.which(prog, path=path) is None:
        raise SpecError(
            "command",
            f"{prog!r} is not on PATH",
            "install it or give the full path, e.g. python train.py",
        )
    script = script_arg(spec.command)
    if script is not None:
        target = Path(script) if Path(script).is_absolute() else Path(spec.working_dir or ".")
        if not Path(script).is_absolute():
            target = target / script
        if not target.is_file():
            # Caught here, not as the job's exit 2 ("can't open file") a moment later.
            raise SpecError(
                "command",
                f"script {script!r} does not exist in {spec.working_dir}",
                "check the name, or pass --workdir with the folder that holds it",
            )


def check_gpus(spec: TrainSpec, backend: str) -> list[int]:
    """This host's GPU indices, when the job asks for GPUs and could ever fit on them."""
    if spec.gpus <= 0:
        return []
    try:
        from ..monitor import gpu_inventory

        host = [g.index for g in gpu_inventory()]
    except MonitorUnavailableError as e:
        raise SubmitError(
            backend,
            f"the job asks for {spec.gpus:g} GPU(s) per worker but this host cannot give any: "
            f"{e.reason}. Use --gpus 0 to run on CPU, or submit to a cluster backend",
        ) from None
    if _placement.place(spec.gpus, spec.workers, host, {}) is None:
        raise SubmitError(
            backend,
            f"the job needs {spec.gpus:g} GPU(s) x {spec.workers} worker(s) but this host has "
            f"{len(host)} GPU(s) in all; lower --workers/--gpus",
        )
    return host


def container_plan(spec: TrainSpec, image: str, forced: str | None) -> ContainerPlan | None:
    """The engine, image and GPU pass-through checks (None: workers run as processes)."""

    if forced is None:
        return plan_job(spec, image)
    try:
        return plan_job(spec, image, runtime=forced)
    except BackendUnavailableError as e:  # the option asked for what is not here
        why = e.detail.removesuffix(f"; {e.hint}" if e.hint else "")
        why = why.removeprefix("--runtime container, but ")
        raise SpecError(
            "backend_options.runtime",
            f"is container, but {why}",
            "start Docker or `podman system service` (or set DOCKER_HOST), or use runtime=process",
        ) from None


def plan_placement(
    spec: TrainSpec, store: JobStore, backend: str, warnings: list[str]
) -> list[Placement]:
    """Each rank on this host, with the GPUs it would get if it started now (the
    supervisor places it for real, under the placement lock, when it starts)."""
    host = socket.gethostname()
    capacity = check_gpus(spec, backend)
    alloc: list[list[int]] | None = [[] for _ in range(spec.workers)]
    if spec.gpus > 0:
        used = _placement.usage(
            [
                (float(json.loads(r["spec_json"]).get("gpus", 0)), r["details"]["gpu_alloc"])
                for r in store.active_rows(backend=backend)
                if r["details"].get("gpu_alloc")
            ]
        )
        alloc = _placement.place(spec.gpus, spec.workers, capacity, used)
        if alloc is None:
            warnings.append(
                f"the GPUs are busy now: the job waits (Pending, Queued) until "
                f"{spec.gpus:g} x {spec.workers} are free"
            )
    return [
        Placement(
            rank=rank,
            node=host,
            gpu_devices=",".join(str(i) for i in alloc[rank]) or None if alloc else None,
        )
        for rank in range(spec.workers)
    ]
