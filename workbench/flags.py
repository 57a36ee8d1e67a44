"""The submit flags, shared by the CLI and the notebook magics (one parser serves both).

Names follow Arena where they overlap: --name, --workers, --gpus, --image, --data SRC:DST,
--env K=V, --retry, --priority.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._spec_limits import show
from .errors import SpecError
from .spec import TrainSpec

FLAG_FIELDS = {
    "name": "name",
    "image": "image",
    "workers": "workers",
    "gpus": "gpus",
    "procs_per_worker": "procs_per_worker",
    "instance_spec": "instance_spec",
    "cpu": "cpu",
    "memory": "memory",
    "framework": "framework",
    "working_dir": "working_dir",
    "retry": "max_retries",
    "timeout": "timeout",
    "priority": "priority",
    "queue": "queue",
    "backend": "backend",
    "runtime": "runtime",
}


def add_spec_flags(p: argparse.ArgumentParser) -> None:
    """Add every TrainSpec flag to ``p`` (defaults None so a -f file's values survive)."""
    p.add_argument(
        "--name", help="job name (DNS-1123: lowercase, digits, '-'); generated when omitted"
    )
    p.add_argument(
        "--image", "-i", help="image: a catalogue name (pytorch, pytorch:2.13) or a full reference"
    )
    p.add_argument(
        "--workers", "-w", type=_number_text, help="number of workers (nodes), default 1"
    )
    p.add_argument(
        "--gpus",
        "-g",
        type=_number_text,
        help="GPUs per worker (0.5 = half a shared GPU), default 0",
    )
    p.add_argument(
        "--procs-per-worker",
        "--nproc-per-node",
        dest="procs_per_worker",
        type=_number_text,
        help="processes per worker; defaults to --gpus (1 on CPU)",
    )
    p.add_argument(
        "--spec",
        "-s",
        dest="instance_spec",
        help="instance spec, e.g. gpu.1x (see `workbench specs`)",
    )
    p.add_argument("--cpu", type=_number_text, help="vCPUs per worker")
    p.add_argument("--memory", help="memory per worker, e.g. 16Gi")
    p.add_argument(
        "--framework",
        choices=["pytorch", "tensorflow", "mpi", "plain"],
        help="distributed env to give the workers; defaults to the image's",
    )
    p.add_argument(
        "--data", "-d", action="append", metavar="SRC:DST[:ro|rw]", help="mount data (repeatable)"
    )
    p.add_argument(
        "--output",
        action="append",
        metavar="DST:URL",
        dest="outputs",
        help="upload DST to URL when the job ends (repeatable)",
    )
    p.add_argument(
        "--env", "-e", action="append", metavar="K=V", help="environment variable (repeatable)"
    )
    p.add_argument(
        "--workdir", dest="working_dir", help="working directory, default the current one"
    )
    p.add_argument(
        "--retry", type=_number_text, help="restart the whole gang up to N times on failure"
    )
    p.add_argument("--timeout", help="fail the job after this long, e.g. 30m, 2h")
    p.add_argument("--priority", help="priority class (cluster backends)")
    p.add_argument("--queue", help="queue (Volcano/Kueue on cluster backends)")
    p.add_argument("--backend", help="where to run: local (default)")
    p.add_argument(
        "--backend-opt",
        action="append",
        dest="backend_options",
        metavar="KEY=VALUE",
        help="an option of the chosen backend (repeatable), e.g. runtime=process (local)",
    )
    p.add_argument(
        "--flavor",
        help="kubernetes backend: indexed (a batch/v1 Indexed Job) or kubeflow (a PyTorchJob, "
        "TFJob or MPIJob by the framework); "
        "short for --backend-opt flavor=...",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="run every check and show where the job would run; create nothing",
    )
    p.add_argument(
        "--runtime",
        choices=["auto", "process", "container", "pod"],
        help="local backend: workers as containers (Docker/Podman) or processes; "
        "auto (default) picks containers when a container engine answers",
    )


def _number_text(value: str) -> str:
    # Keep the text: TrainSpec.validate gives the error that names the field.
    return value


def parse_env(items: list[str] | None) -> dict[str, str]:
    """``["K=V", ...]`` -> dict; a bad item is a SpecError naming it."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError("env", f"{show(item)} is not K=V", "write --env NAME=value")
        out[key] = value
    return out


def parse_backend_options(items: list[str] | None) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` -> dict; the backend checks names and values in admit()."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SpecError(
                "backend_options",
                f"{show(item)} is not KEY=VALUE",
                "e.g. --backend-opt runtime=process",
            )
        out[key] = value
    return out


def parse_outputs(items: list[str] | None) -> list[str]:
    """``--output DST:URL`` -> the spec's ``URL:DST:rw`` mount text."""
    out = []
    for item in items or []:
        dst, sep, url = item.partition(":")
        if not sep or not dst or not url:
            raise SpecError(
                "output", f"{show(item)} is not DST:URL", "e.g. --output ./ckpt:oss://bucket/run1"
            )
        out.append(f"{url}:{dst}:rw")
    return out


def split_command(args: list[str]) -> tuple[list[str], list[str]]:
    """``[flags..., "--", program...]`` -> (flags, program); no ``--`` -> (args, [])."""
    if "--" not in args:
        return list(args), []
    i = args.index("--")
    return args[:i], args[i + 1 :]


def normalise_command(command: list[str]) -> list[str]:
    """Drop a leading ``--``; a bare script gets its interpreter (``train.py`` -> python)."""
    if command and command[0] == "--":
        command = command[1:]
    if command and command[0].endswith(".py"):
        return ["python", *command]
    if command and command[0].endswith(".sh"):
        return ["bash", *command]
    return command


def spec_from_args(
    ns: argparse.Namespace, command: list[str], base: TrainSpec | None = None
) -> TrainSpec:
    """Merge flags over an optional base spec (from -f) into a TrainSpec."""
    data: dict[str, Any] = base.to_dict() if base else {}
    for attr, field_name in FLAG_FIELDS.items():
        value = getattr(ns, attr, None)
        if value is not None:
            data[field_name] = value
    if getattr(ns, "data", None):
        data["data"] = list(data.get("data") or []) + list(ns.data)
    if getattr(ns, "outputs", None):
        data["outputs"] = list(data.get("outputs") or []) + parse_outputs(ns.outputs)
    if getattr(ns, "env", None):
        data["env"] = {**(data.get("env") or {}), **parse_env(ns.env)}
    if getattr(ns, "backend_options", None):
        data["backend_options"] = {
            **(data.get("backend_options") or {}),
            **parse_backend_options(ns.backend_options),
        }
    if getattr(ns, "flavor", None):
        data["backend_options"] = {**(data.get("backend_options") or {}), "flavor": ns.flavor}
    command = normalise_command(command)
    if command:
        data["command"] = command
    if not data.get("command"):
        raise SpecError(
            "command", "is missing", "put the program after the flags, e.g. -- python train.py"
        )
    return TrainSpec.from_dict(data)
