"""One rank of a container job: ``python -m workbench.backends._container_rank ... -- CMD``.

The local supervisor runs this in place of the user's command when the job's runtime is
"container", so its gang semantics, retries, cancel and log files work unchanged. This
process creates the rank's container through the Docker Engine API (contract env, host
network, exactly the rank's GPUs, the job folder and working directory at their own paths,
data mounts at their DST as written, labels), streams the container's output to its own
stdout (the rank's log), and exits with the container's exit code. SIGTERM stops the
container within a grace period shorter than the supervisor's, and it is always removed.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from .. import contract
from ..data.staging import MOUNTS_ENV
from ..monitor.metrics import MetricSink
from ..monitor.stream import MetricByteSplitter
from ..spec import TrainSpec
from ._container_engine import (
    AGENT_LABEL,
    LABEL_ATTEMPT,
    LABEL_JOB,
    LABEL_RANK,
    ContainerPlan,
    connect,
    docker_sdk,
    gpu_options,
)

# Set by the supervisor for every rank on top of the host env; these pass into containers.
RUNTIME_ENV = ("PYTHONUNBUFFERED", "CUDA_DEVICE_ORDER")
# Host-only values that must never reach the container: the image has its own.
HOST_ONLY = ("PATH", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "HOME")


class Terminated(Exception):
    """SIGTERM/SIGINT/SIGHUP arrived: stop the container."""


def _on_signal(signum: int, frame: object) -> None:
    raise Terminated


def contract_keys(framework: str) -> set[str]:
    """Names of the variables the distributed contract sets (for any rank)."""
    world = contract.World(
        workers=2, procs_per_worker=2, master_addr="127.0.0.1", master_port=1,
        hosts=("127.0.0.1",) * 2, ports=(2, 3),
    )  # fmt: skip
    keys = set(contract.worker_env(framework, world, 0, "x", 1, "/x", "/x/hostfile"))
    if framework == "pytorch":
        keys |= set(contract.pytorch_process_env(world, 0, 0))
    return keys


def container_env(environ: dict[str, str], spec: TrainSpec, user_keys: set[str]) -> dict[str, str]:
    """What the container gets: the contract, the user's env, WORKBENCH_*; no host paths."""
    keep = contract_keys(spec.framework or "plain") | set(user_keys) | set(RUNTIME_ENV)
    env = {
        k: v
        for k, v in environ.items()
        if (k in keep or k.startswith("WORKBENCH_")) and k not in HOST_ONLY
    }
    # Inside, data is at its DST itself; no remapping as for processes.
    env.pop(MOUNTS_ENV, None)
    env.pop("WORKBENCH_HOME", None)
    env.pop("WORKBENCH_CONFIG", None)
    # The engine passes only the rank's GPUs, renumbered from 0 inside the container.
    gpus = host_gpus(environ)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
    return env


def host_gpus(environ: dict[str, str]) -> list[str]:
    """The host GPU indices the supervisor gave this rank."""
    return [g for g in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]


def volumes(
    spec: TrainSpec, environ: dict[str, str], job_dir: str, cwd: str, argv: list[str]
) -> dict[str, dict[str, str]]:
    """Host path -> {bind, mode}: job folder, working dir, data at DST, named scripts."""
    binds: dict[str, dict[str, str]] = {}

    def bind(host: str, inside: str, mode: str) -> None:
        binds[os.path.realpath(host)] = {"bind": inside, "mode": mode}

    bind(cwd, cwd, "rw")  # relative paths in the command resolve as on the host
    bind(job_dir, job_dir, "rw")  # logs, metrics, hostfile, WORKBENCH_JOB_DIR
    for arg in argv[1:]:  # absolute script paths outside the working dir (tests/scripts/x.py)
        if os.path.isabs(arg) and os.path.isfile(arg) and not _under(arg, (cwd, job_dir)):
            bind(arg, arg, "ro")
    mapped: dict[str, str] = json.loads(environ.get(MOUNTS_ENV) or "{}")
    modes = {m.dst: m.mode for m in spec.data}
    modes.update({m.dst: "rw" for m in spec.outputs})
    for dst, local in mapped.items():  # absolute DSTs: /data is /data inside
        bind(local, os.path.normpath(dst), "rw" if modes.get(dst) == "rw" else "ro")
    for m in spec.data:  # relative DSTs are symlinks in the working dir: bind their target
        if os.path.isabs(m.dst):
            continue
        link = Path(cwd) / m.dst
        if link.is_symlink():
            target = os.path.realpath(link)
            if not _under(target, (cwd, job_dir)):
                bind(target, target, "rw" if m.mode == "rw" else "ro")
    return binds


def _under(path: str, roots: tuple[str, ...]) -> bool:
    real = os.path.realpath(path)
    return any(real == os.path.realpath(r) or real.startswith(os.path.realpath(r) + os.sep)
               for r in roots)  # fmt: skip


def ensure_image(client: Any, plan: ContainerPlan, job_dir: str) -> None:
    """Pull the image once per job (the first rank to get the lock pulls; others wait)."""
    docker = docker_sdk()
    with open(os.path.join(job_dir, ".image.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            client.images.get(plan.image)
            return
        except docker.errors.ImageNotFound:
            pass
        print(f"[workbench] pulling {plan.image}", flush=True)
        t0 = time.time()
        client.images.pull(plan.image)
        print(f"[workbench] pulled {plan.image} in {time.time() - t0:.0f}s", flush=True)


def split_records(job_dir: Path, rank: int) -> tuple[MetricByteSplitter, MetricSink]:
    """The container's copier: a splitter for its output and the sink for the records it
    finds (run.log scalars, the agent's GPU samples and notes), in the job's metric files."""
    return MetricByteSplitter(), MetricSink(job_dir, rank)


def run_rank(args: argparse.Namespace, argv: list[str]) -> int:
    """Create, start, stream, wait, remove; returns the container's exit code."""
    environ = dict(os.environ)
    job_dir = environ["WORKBENCH_JOB_DIR"]
    plan = ContainerPlan.load(job_dir)
    spec = TrainSpec.from_yaml(Path(job_dir) / "spec.yaml")
    cwd = os.getcwd()
    docker = docker_sdk()
    grace = max(1, int(float(environ.get("WORKBENCH_STOP_GRACE", "10")) * 0.6))
    client = connect(plan.engine, timeout=max(60, grace + 30))
    container = None
    try:
        if plan.pull:
            ensure_image(client, plan, job_dir)
        image_labels = client.images.get(plan.image).labels or {}
        if AGENT_LABEL in image_labels:
            # The agent forwards signals and exit codes and reports the container's GPUs
            # as metric lines in its output; they go to the job's metrics, not its log.
            argv = [*image_labels[AGENT_LABEL].split(), "--", *argv]
        # run.log() in the container frames its records the same way: split them off too.
        splitter, sink = split_records(Path(job_dir), args.rank)
        labels = {LABEL_JOB: args.job, LABEL_RANK: str(args.rank), LABEL_ATTEMPT: str(args.attempt)}
        options: dict[str, Any] = dict(
            image=plan.image,
            command=argv,
            name=f"wb-{args.job}-r{args.rank}-p{args.proc}-a{args.attempt}",
            # spec.yaml keeps every env name (credentials masked); the values come from environ.
            environment=container_env(environ, spec, set(spec.env)),
            volumes=volumes(spec, environ, job_dir, cwd, argv),
            working_dir=cwd,
            labels=labels,
            network_mode="host",  # ranks meet on 127.0.0.1, as process jobs do
            ipc_mode="host",  # PyTorch's shared-memory transports between local ranks
            init=True,  # a real PID 1 that forwards SIGTERM to the user's program
            stop_signal="SIGTERM",
            detach=True,
            **gpu_options(plan, host_gpus(environ)),
        )
        if os.getuid() != 0:  # files in the job folder stay the user's
            options["user"] = f"{os.getuid()}:{os.getgid()}"
            options["environment"].setdefault("HOME", "/tmp")
        container = client.containers.create(**options)
        # Attached before start, so no output is missed; streams straight from the
        # container's stdio (a followed `logs` polls its log file: ~0.4 s later at exit).
        output = container.attach(stream=True, logs=True, stdout=True, stderr=True)
        container.start()
        try:
            for chunk in output:
                user, records = splitter.split_frames(chunk)
                sys.stdout.buffer.write(user)
                sys.stdout.buffer.flush()
                sink.write(records)
            sys.stdout.buffer.write(splitter.close())
            sys.stdout.buffer.flush()
        finally:
            sink.close()
        code = int(container.wait().get("StatusCode", 1))
        return code
    except Terminated:
        if container is not None:
            with contextlib.suppress(Exception):
                container.stop(timeout=grace)
        return 128 + signal.SIGTERM
    except docker.errors.APIError as e:
        print(f"[workbench] container engine: {e.explanation or e}", flush=True)
        return 127 if "executable file not found" in str(e) or "no such file" in str(e) else 125
    finally:
        if container is not None:
            with contextlib.suppress(Exception):
                container.remove(force=True)
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``--home H --job NAME --rank R --proc P --attempt A -- CMD...``."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    split = args_list.index("--")
    parser = argparse.ArgumentParser(prog="python -m workbench.backends._container_rank")
    parser.add_argument("--home", required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--proc", type=int, default=0)
    parser.add_argument("--attempt", type=int, default=1)
    ns = parser.parse_args(args_list[:split])
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    return run_rank(ns, args_list[split + 1 :])


if __name__ == "__main__":
    sys.exit(main())
