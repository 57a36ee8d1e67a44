"""What a job is: TrainSpec (the request), Mount, JobStatus and JobRecord (the wire model).

Standard library and yaml only. Validation raises SpecError naming the field and the fix.
"""

from __future__ import annotations

import enum
import re
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ._spec_limits import (
    MAX_COMMAND,
    MAX_CPU,
    MAX_LABEL,
    MAX_MOUNTS,
    MAX_PROCS,
    MAX_RETRIES,
    MAX_STRING,
    MAX_WORKERS,
    as_float,
    as_int,
    check_command,
    check_path,
    check_size,
    check_text,
    checked_env,
    kind,
    parse_duration,
    read_spec_file,
    show,
)
from .catalog import FRAMEWORKS, Catalog, load_catalog
from .errors import SpecError
from .redaction import REDACTED as REDACTED  # re-exported: secrets live in redaction.py
from .redaction import SECRET_ENV as SECRET_ENV
from .redaction import redact_env_value, redact_url, redact_urls

# Used with .match (anchored at the start); \Z, unlike $, refuses a trailing newline.
DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
MAX_NAME = 50  # room for "-worker-NN" and a pod's random suffix within 63
MEMORY = re.compile(r"[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?\Z")
# Set by workbench for every rank (contract.py); a user value would break the world.
RESERVED_ENV = frozenset(
    {
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "PET_NNODES",
        "PET_NODE_RANK",
        "PET_NPROC_PER_NODE",
        "PET_MASTER_ADDR",
        "PET_MASTER_PORT",
        "TF_CONFIG",
        "CUDA_VISIBLE_DEVICES",
    }
)
MOUNT_MODES = ("ro", "rw")
RUNTIMES = ("auto", "process", "container", "pod")  # local: process/container; Kubernetes: pod
_NAME_FIX = (
    "use lowercase letters, digits and '-', starting and ending with a letter "
    "or digit (DNS-1123), e.g. mnist-1"
)


class JobStatus(str, enum.Enum):
    """The life of a job."""

    PENDING = "Pending"
    RUNNING = "Running"
    CANCELLING = "Cancelling"  # cancel asked, the stop is under way (not terminal)
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"

    @property
    def terminal(self) -> bool:
        """True once the job can change no more."""
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)

    @property
    def active(self) -> bool:
        """True while the job may still run (Pending, Running or Cancelling)."""
        return not self.terminal


# Every status that is not terminal, in the order a job passes them.
ACTIVE_STATUSES = tuple(s.value for s in JobStatus if not s.terminal)


def parse_statuses(values: list[str]) -> list[str] | None:
    """Job states from filters like ``["running", "Pending,Failed"]`` (any case); None for all.

    One rule for the CLI, the REST API and the magics: an unknown state is a SpecError that
    names the valid ones, never an empty list.
    """
    out: list[str] = []
    known = {s.value.lower(): s.value for s in JobStatus}
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if part.lower() not in known:
                raise SpecError(
                    "status",
                    f"unknown status {show(part)}",
                    f"use one of {', '.join(known.values())}",
                )
            out.append(known[part.lower()])
    return out or None


class RankState(str, enum.Enum):
    """The life of one worker (rank) within the current attempt."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"  # ended by workbench: gang failure, cancel or timeout


@dataclass(frozen=True)
class Mount:
    """A data mount ``SRC:DST[:ro|rw]``; ``src`` is a local path or any fsspec URL."""

    src: str
    dst: str
    mode: str = "ro"

    @classmethod
    def parse(cls, text: str, field_name: str = "data") -> Mount:
        """Parse ``SRC:DST[:ro|rw]`` (SRC may itself hold ``://``)."""
        raw = text.strip()
        mode = "ro"
        for m in MOUNT_MODES:
            if raw.endswith(":" + m):
                raw, mode = raw[: -len(m) - 1], m
        src, sep, dst = raw.rpartition(":")
        # A URL's authority may hold colons of its own (user:secret@host, host:port). A
        # colon inside it followed by "...@" or a port is not the SRC:DST colon: there is
        # no DST. Without this "s3://KEY:SECRET@bucket/x" put SECRET in DST, in clear.
        scheme = re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", raw)
        if scheme and sep:
            authority_end = raw.find("/", scheme.end())
            head = dst.split("/", 1)[0]
            inside = authority_end < 0 or len(src) < authority_end
            if inside and ("@" in head or head.isdigit()):
                sep = ""
        if not sep or not src or not dst or src.endswith(":/") or dst.startswith("//"):
            raise SpecError(
                field_name,
                f"malformed mount {show(text)}",
                "write SRC:DST[:ro|rw], e.g. oss://bucket/imagenet:/data or ./data:/data:rw",
            )
        return cls(src=src, dst=dst, mode=mode)

    @property
    def scheme(self) -> str:
        """The URL scheme of ``src`` ('' for a local path)."""
        m = re.match(r"^([a-zA-Z][a-zA-Z0-9+.-]*)://", self.src)
        return m.group(1).lower() if m else ""

    def __str__(self) -> str:
        return f"{self.src}:{self.dst}:{self.mode}"

    def __repr__(self) -> str:  # tracebacks and messages: never the credentials in src
        return f"{redact_url(self.src)}:{self.dst}:{self.mode}"


@dataclass
class TrainSpec:
    """A request for a distributed training job. Field names follow Kubeflow where they overlap."""

    command: list[str]
    name: str | None = None
    image: str = "pytorch"
    workers: int = 1
    gpus: float = 0
    procs_per_worker: int | None = None
    instance_spec: str | None = None
    cpu: float | None = None
    memory: str | None = None
    framework: str | None = None
    data: list[Mount] = field(default_factory=list)
    outputs: list[Mount] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict, repr=False)  # may hold credentials
    working_dir: str | None = None
    max_retries: int = 0
    timeout: float | None = None
    priority: str | None = None
    queue: str | None = None
    backend: str | None = None
    # How the local backend runs workers: auto (containers when an engine answers),
    # process or container. Cluster backends always run containers.
    runtime: str = "auto"
    # Options only the chosen backend understands (local: runtime; Kubernetes: namespace,
    # flavour, tolerations ...): the backend validates them in admit().
    backend_options: dict[str, Any] = field(default_factory=dict)

    # Accepted on input for people who know Arena/Kubeflow spellings.
    ALIASES = {
        "gpus_per_worker": "gpus",  # the JobRecord's and Plan's name for the same quantity
        "nproc_per_node": "procs_per_worker",
        "nprocPerNode": "procs_per_worker",
        "retry": "max_retries",
        "spec": "instance_spec",
        "workdir": "working_dir",
        "workingDir": "working_dir",
    }

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], base_dir: Path | None = None) -> TrainSpec:
        """Build a spec from a mapping (YAML file, JSON body); unknown keys are errors."""
        if not isinstance(data, dict):
            raise SpecError("spec", f"must be a mapping of field names to values, got {kind(data)}")
        check_size(data)  # first: everything below may walk or copy the values
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            name = cls.ALIASES.get(key, key) if isinstance(key, str) else key
            if name not in known:
                sane = isinstance(key, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", key)
                raise SpecError(
                    key if sane else "spec",
                    "unknown field" if sane else f"unknown field {show(key)}",
                    f"known fields: {', '.join(sorted(known))}",
                )
            if name in values:  # e.g. gpus and gpus_per_worker: which one was meant?
                raise SpecError(key, f"gives {name} a second time", "give only one of them")
            values[name] = value
        if "command" not in values:
            raise SpecError(
                "command", "is required", "give the program to run, e.g. [python, train.py]"
            )
        command = values["command"]
        if isinstance(command, str):
            import shlex

            check_text(command, "command", MAX_COMMAND, only_nul=True)
            try:
                command = shlex.split(command)
            except ValueError as e:  # e.g. an unbalanced quote
                raise SpecError(
                    "command",
                    f"cannot split {show(command)}: {e}",
                    "balance the quotes, or give a list",
                ) from None
        # The containers' shapes are checked here, not only in validate: to_dict (used to
        # merge CLI flags over a -f file) copies them before validate runs.
        if not isinstance(command, list):
            raise SpecError(
                "command", f"must be a list of strings, got {kind(command)}", "e.g. [python, t.py]"
            )
        values["command"] = command
        for key in ("data", "outputs"):
            if key in values:
                items = values[key] or []
                if not isinstance(items, list):
                    raise SpecError(key, f"must be a list of SRC:DST strings, got {kind(items)}")
                if len(items) > MAX_MOUNTS:
                    raise SpecError(key, f"has {len(items)} mounts, at most {MAX_MOUNTS}")
                values[key] = [m if isinstance(m, Mount) else _mount_from(m, key) for m in items]
        if values.get("env") is None:
            values.pop("env", None)
        elif not isinstance(values["env"], dict):
            raise SpecError(
                "env",
                f"must be a mapping of NAME to value, got {kind(values['env'])}",
                "e.g. LR=0.1",
            )
        if values.get("backend_options") is None:
            values.pop("backend_options", None)
        else:
            values["backend_options"] = _checked_options(values["backend_options"])
        if "timeout" in values:
            values["timeout"] = parse_duration(values["timeout"])
        spec = cls(**values)
        if spec.working_dir is not None:
            # checked here, not only in validate: it is a path this method resolves
            check_path(spec.working_dir, "working_dir", "give a directory path")
        if spec.working_dir and base_dir and not Path(spec.working_dir).is_absolute():
            spec.working_dir = str((base_dir / spec.working_dir).resolve())
        return spec

    @classmethod
    def from_yaml(cls, path: str | Path) -> TrainSpec:
        """Read a spec from a YAML file; relative working_dir resolves against the file.

        The file is bounded (MAX_SPEC_FILE bytes) and may not use anchors or aliases, whose
        expansion turns a few hundred bytes into gigabytes.
        """
        p = Path(path)
        return cls.from_dict(read_spec_file(p), base_dir=p.parent.resolve())

    def to_dict(self) -> dict[str, Any]:
        """The plain form (round-trips through from_dict); env values are as given."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("data", "outputs"):
                value = [str(m) for m in value]
            elif f.name == "env":
                value = dict(value)
            elif f.name == "command":
                value = list(value)
            elif f.name == "backend_options":
                value = dict(value)
            out[f.name] = value
        return out

    def to_yaml(self) -> str:
        """YAML text of to_dict()."""
        import yaml

        # libyaml's dumper where present: a fifth of a cluster submit's client time was
        # the pure-Python one (py-spy, bench/bench_kubernetes.py); the text is the same.
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        return yaml.dump(self.to_dict(), Dumper=dumper, sort_keys=False)

    # ---- secrets ------------------------------------------------------------------------
    def secret_env(self) -> dict[str, str]:
        """The env entries kept out of the spec: credential-looking names, and any value
        holding a URL with credentials (``DATABASE_URL=postgres://u:pw@db``)."""
        return {k: v for k, v in self.env.items() if redact_env_value(k, v) != v}

    def secrets(self) -> dict[str, Any]:
        """The real values of everything redacted() masks, keyed by field and position:
        ``{"env": {NAME: value}, "data"|"outputs"|"command": {"index": value}}``."""
        out: dict[str, Any] = {"env": self.secret_env()}
        for key in ("data", "outputs"):
            mounts = {str(i): m.src for i, m in enumerate(getattr(self, key))
                      if redact_url(m.src) != m.src}  # fmt: skip
            if mounts:
                out[key] = mounts
        args = {str(i): a for i, a in enumerate(self.command)
                if isinstance(a, str) and redact_urls(a) != a}  # fmt: skip
        if args:
            out["command"] = args
        return out

    def restore_secrets(self, saved: dict[str, Any]) -> TrainSpec:
        """Put the real values from secrets() back into this redacted spec; returns self.

        A value goes back only where its masked form is what the spec holds, so a spec
        edited since (mounts reordered, args changed) never gets a credential in the
        wrong place.
        """
        self.env.update(saved.get("env") or {})
        for key in ("data", "outputs"):
            mounts: list[Mount] = getattr(self, key)
            for i, src in (saved.get(key) or {}).items():
                i = int(i)
                if i < len(mounts) and mounts[i].src == redact_url(src):
                    mounts[i] = Mount(src=src, dst=mounts[i].dst, mode=mounts[i].mode)
        for i, arg in (saved.get("command") or {}).items():
            i = int(i)
            if i < len(self.command) and self.command[i] == redact_urls(arg):
                self.command[i] = arg
        return self

    def redacted(self) -> TrainSpec:
        """A copy safe to store, show or log: credentials in env values, mount URLs and
        command-line URLs are masked (the real ones are in secrets())."""
        copy = TrainSpec.from_dict(self.to_dict())
        copy.env = {k: redact_env_value(k, v) for k, v in self.env.items()}
        for key in ("data", "outputs"):
            setattr(copy, key, [Mount(src=redact_url(m.src), dst=m.dst, mode=m.mode)
                                for m in getattr(self, key)])  # fmt: skip
        copy.command = [redact_urls(a) if isinstance(a, str) else a for a in self.command]
        return copy

    # ---- validation ---------------------------------------------------------------------
    def validate(self, catalog: Catalog | None = None, backends: tuple[str, ...] = ()) -> TrainSpec:
        """Check every field's type, size and value and fill defaults; returns self.

        The one place input is checked, so the CLI, YAML files, REST, magics and the Python
        API share every rule. Raises SpecError naming the field.
        """
        catalog = catalog or load_catalog()
        check_command(self.command)
        if self.name is not None:
            check_text(self.name, "name", MAX_LABEL, _NAME_FIX)
            if not DNS1123.match(self.name):
                raise SpecError("name", f"{show(self.name)} is not a valid job name", _NAME_FIX)
            if len(self.name) > MAX_NAME:
                raise SpecError(
                    "name", f"is {len(self.name)} characters long", f"keep it to {MAX_NAME}"
                )
        self.workers = as_int(
            self.workers, "workers", 1, MAX_WORKERS, "give 1 or more workers, e.g. --workers 2"
        )
        self.gpus = self._check_gpus(self.gpus)
        check_text(self.image, "image", MAX_STRING, "e.g. pytorch or pytorch:2.13")
        if "/" not in self.image and len(self.image) > MAX_LABEL:  # a catalogue name[:tag]
            raise SpecError(
                "image",
                f"is {len(self.image)} characters long, at most {MAX_LABEL}",
                "e.g. pytorch",
            )
        if not self.image or any(c.isspace() for c in self.image):
            raise SpecError(
                "image", f"{show(self.image)} is not an image", "e.g. pytorch or pytorch:2.13"
            )
        _, image = catalog.resolve_image(self.image)
        if self.framework is None:
            self.framework = image.framework if image else "pytorch"
        if not isinstance(self.framework, str) or self.framework not in FRAMEWORKS:
            raise SpecError(
                "framework",
                f"unknown framework {show(self.framework)}",
                f"use one of {', '.join(FRAMEWORKS)}",
            )
        if self.instance_spec is None:
            self.instance_spec = catalog.smallest_spec_for(self.gpus).name
        check_text(self.instance_spec, "spec", MAX_LABEL, "e.g. gpu.1x (see `workbench specs`)")
        offer = catalog.spec(self.instance_spec)
        if self.gpus > offer.gpus:
            raise SpecError(
                "gpus",
                f"{self.gpus:g} GPUs per worker is more than spec {offer.name} offers ({offer.gpus:g})",
                f"lower --gpus or pick a larger spec, e.g. {catalog.smallest_spec_for(self.gpus).name}",
            )
        if self.procs_per_worker is None:
            self.procs_per_worker = max(1, int(self.gpus)) if self.gpus >= 1 else 1
        self.procs_per_worker = as_int(
            self.procs_per_worker,
            "procs_per_worker",
            1,
            MAX_PROCS,
            "give 1 or more, usually one per GPU",
        )
        if self.cpu is not None:
            self.cpu = as_float(self.cpu, "cpu", "e.g. 4 or 0.5")
            if not 0 < self.cpu <= MAX_CPU:
                raise SpecError(
                    "cpu", f"must be positive and at most {MAX_CPU:g}, got {self.cpu:g}", "e.g. 4"
                )
        if self.memory is not None:
            if isinstance(self.memory, int) and not isinstance(self.memory, bool):
                self.memory = str(self.memory)  # YAML reads `memory: 1024` as a number
            check_text(self.memory, "memory", MAX_LABEL, "e.g. 16Gi or 512Mi")
            if not MEMORY.match(self.memory):
                raise SpecError(
                    "memory", f"{show(self.memory)} is not a quantity", "e.g. 16Gi or 512Mi"
                )
        self.env = checked_env(self.env, RESERVED_ENV)
        for key in ("data", "outputs"):
            self._check_mounts(key)
        self.max_retries = as_int(
            self.max_retries, "max_retries", 0, MAX_RETRIES, "give 0 or more, e.g. --retry 2"
        )
        self.timeout = parse_duration(self.timeout)
        if self.working_dir is not None:
            check_path(self.working_dir, "working_dir", "give a directory path")
        for key in ("priority", "queue", "backend"):
            if getattr(self, key) is not None:
                check_text(getattr(self, key), key, MAX_LABEL)
        if not isinstance(self.runtime, str) or self.runtime not in RUNTIMES:
            raise SpecError(
                "runtime",
                f"unknown runtime {show(self.runtime)}",
                f"use one of {', '.join(RUNTIMES)}",
            )
        self.backend_options = _checked_options(self.backend_options)
        if self.backend is not None and backends and self.backend not in backends:
            raise SpecError(
                "backend",
                f"unknown backend {show(self.backend)}",
                f"use one of {', '.join(backends)}",
            )
        check_size(self.to_dict())  # each field is bounded; together they are too
        return self

    def _check_mounts(self, key: str) -> None:
        mounts = getattr(self, key)
        if not isinstance(mounts, list):
            raise SpecError(key, f"must be a list of SRC:DST strings, got {kind(mounts)}")
        if len(mounts) > MAX_MOUNTS:
            raise SpecError(key, f"has {len(mounts)} mounts, at most {MAX_MOUNTS}")
        for m in mounts:
            if not isinstance(m, Mount):
                raise SpecError(key, f"{show(m)} is not a mount", "write SRC:DST[:ro|rw]")
            check_text(m.src, key, MAX_STRING, "write SRC:DST[:ro|rw]")
            if not m.scheme:  # a local source is a file name; a URL's keys may be longer
                check_path(m.src, key, "write SRC:DST[:ro|rw]")
            check_path(m.dst, key, "write SRC:DST[:ro|rw]")
            if m.mode not in MOUNT_MODES:
                raise SpecError(key, f"mode {show(m.mode)} of {show(str(m))}", "use ro or rw")
            if ".." in Path(m.dst).parts:
                raise SpecError(
                    key, f"destination {show(m.dst)} climbs out with '..'", "use a plain path"
                )

    def _check_gpus(self, value: Any) -> float:
        gpus = as_float(value, "gpus", "e.g. --gpus 1 or --gpus 0.5")
        if gpus < 0:
            raise SpecError("gpus", f"must be 0 or more, got {show(value)}", "use 0 for CPU-only")
        if gpus > 1 and gpus != int(gpus):
            raise SpecError(
                "gpus", f"{gpus:g} is neither whole nor a fraction of one GPU", "e.g. 0.5, 1 or 2"
            )
        return gpus

    def image_ref(self, catalog: Catalog | None = None) -> str:
        """The full image reference this spec runs."""
        return (catalog or load_catalog()).resolve_image(self.image)[0]

    @property
    def world_size(self) -> int:
        """Processes in the whole job."""
        return self.workers * (self.procs_per_worker or 1)


def _checked_options(options: Any) -> dict[str, Any]:
    """``backend_options``'s shape: a small mapping of option name to a plain value. What the
    names and values mean is the backend's to check (``Backend.validate_options``)."""
    if not isinstance(options, dict):
        raise SpecError(
            "backend_options",
            f"must be a mapping of option to value, got {kind(options)}",
            "e.g. --backend-opt runtime=process",
        )
    if len(options) > MAX_MOUNTS:
        raise SpecError("backend_options", f"has {len(options)} entries, at most {MAX_MOUNTS}")
    out: dict[str, Any] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", key):
            raise SpecError(
                "backend_options",
                f"{show(key)} is not an option name",
                "use letters, digits, '_', '.' and '-'",
            )
        if isinstance(value, str):
            check_text(value, f"backend_options.{key}", MAX_STRING)
        elif not (value is None or isinstance(value, (bool, int, float, list, dict))):
            raise SpecError(
                f"backend_options.{key}", f"must be plain data, got {kind(value)}", "give text"
            )
        out[key] = value
    return out


def _mount_from(value: Any, field_name: str) -> Mount:
    if isinstance(value, str):
        check_text(value, field_name, 2 * MAX_STRING + 8, "write SRC:DST[:ro|rw]")
        return Mount.parse(value, field_name)
    if isinstance(value, dict) and "src" in value and "dst" in value:
        src, dst, mode = value["src"], value["dst"], value.get("mode", "ro")
        for part in (src, dst, mode):
            check_text(part, field_name, MAX_STRING, "give src, dst and mode as strings")
        return Mount(src=src, dst=dst, mode=mode)
    raise SpecError(field_name, f"{show(value)} is not a mount", "write SRC:DST[:ro|rw]")


@dataclass
class RankRecord:
    """One worker of the current attempt."""

    rank: int
    state: RankState = RankState.PENDING
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    gpu_devices: str | None = None  # the CUDA_VISIBLE_DEVICES string it was given
    node: str | None = None  # the host (or cluster node) it runs on
    restarts: int = 0  # times it was started again (a gang restart restarts every rank)
    # Backend-only state (the local backend's process ID and create time, a pod name).
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int | None:
        """The local backend's process ID of the rank's lead process (from ``details``)."""
        pid = self.details.get("pid")
        return pid if isinstance(pid, int) else None

    def to_dict(self) -> dict[str, Any]:
        """Wire form: what every backend has; the backend's own state under ``details``."""
        return {
            "rank": self.rank,
            "state": self.state.value,
            "exit_code": self.exit_code,
            "restarts": self.restarts,
            "node": self.node,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "gpu_devices": self.gpu_devices,
            "details": {k: v for k, v in self.details.items() if k != "node"},
        }


@dataclass
class JobEvent:
    """Something that happened to a job: submitted, started, restarted, failed, ..."""

    time: float
    reason: str
    message: str
    level: str = "info"  # info | warning | error

    def to_dict(self) -> dict[str, Any]:
        """Wire form."""
        return {
            "time": self.time,
            "reason": self.reason,
            "message": self.message,
            "level": self.level,
        }


@dataclass
class JobRecord:
    """A job as every surface sees it; to_dict() is the REST wire model."""

    name: str
    status: JobStatus
    backend: str
    spec: dict[str, Any]
    image: str
    runtime: str = "process"
    created_at: float = field(default_factory=time.time)
    started_at: float | None = None
    finished_at: float | None = None
    attempt: int = 1
    message: str = ""
    price_per_hour: float = 0.0
    job_dir: str | None = None
    # Backend-only state, written by the job's backend: the local supervisor's PID, a GPU
    # allocation, the job folder; pod names on Kubernetes.
    details: dict[str, Any] = field(default_factory=dict)
    ranks: list[RankRecord] = field(default_factory=list)
    events: list[JobEvent] = field(default_factory=list)

    @property
    def workers(self) -> int:
        """Workers requested."""
        return int(self.spec.get("workers", 1))

    @property
    def gpus_total(self) -> float:
        """GPUs in the whole job: GPUs per worker x workers."""
        return self.gpus_per_worker * self.workers

    def elapsed(self, now: float | None = None) -> float:
        """Seconds the job has been running (0 before it starts)."""
        if self.started_at is None:
            return 0.0
        end = self.finished_at or (now if now is not None else time.time())
        return max(0.0, end - self.started_at)

    def cost(self, now: float | None = None) -> float:
        """Estimated cost so far: spec price x seconds x workers."""
        return self.price_per_hour / 3600.0 * self.elapsed(now) * self.workers

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        """IPython's display (``j.wait()`` in a cell): one short line, not every field."""
        codes = [r.exit_code for r in self.ranks]
        text = (
            f"JobRecord(name={self.name!r}, status={self.status.value}, "
            f"workers={self.workers}, elapsed={self.elapsed():.1f}s, exit_codes={codes}"
        )
        p.text(text + (f", message={self.message!r})" if self.message else ")"))

    @property
    def gpus_per_worker(self) -> float:
        """GPUs each worker asked for (the spec's ``gpus``; fractions share a GPU)."""
        return float(self.spec.get("gpus", 0))

    @property
    def restarts(self) -> int:
        """Times the job was started again after a failed attempt (attempt - 1)."""
        return max(0, self.attempt - 1)

    @property
    def node(self) -> str | None:
        """The host or node that runs rank 0, when known."""
        return self.ranks[0].node if self.ranks else None

    @property
    def reason(self) -> str | None:
        """A short CamelCase cause of the current status (see :func:`status_reason`)."""
        return status_reason(self)

    def wire_details(self) -> dict[str, Any]:
        """The backend-only state on the wire: ``details`` (the local backend writes its
        job folder and runtime there) plus ``job_dir`` when set only as an attribute."""
        details = dict(self.details)
        if self.job_dir is not None:
            details.setdefault("job_dir", self.job_dir)
        return details

    def to_dict(self) -> dict[str, Any]:
        """The wire model (docs/openapi.yaml's JobRecord, generated by workbench.wireschema)."""
        now = time.time()
        return {
            "name": self.name,
            "status": self.status.value,
            "message": self.message or None,
            "reason": self.reason,
            "backend": self.backend,
            "image": self.image,
            "spec": self.spec,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "elapsed": self.elapsed(now),
            "attempt": self.attempt,
            "restarts": self.restarts,
            "max_retries": int(self.spec.get("max_retries", 0)),
            "price_per_hour": self.price_per_hour,
            "cost": round(self.cost(now), 6),
            "workers": self.workers,
            "gpus_per_worker": self.gpus_per_worker,
            "gpus_total": self.gpus_total,
            "node": self.node,
            "details": self.wire_details(),
            "ranks": [r.to_dict() for r in self.ranks],
            "events": [e.to_dict() for e in self.events],
        }


# Events that note something without changing the job's status (GPU alerts, staging
# progress, a rank's failure before the gang restarts or fails): never a status's reason.
NOTE_REASONS = ("GpuAlert", "GpuMonitorOff", "Staging", "Staged", "OutputsUploaded", "RankFailed")
# Reasons of a job still on its way: a terminal status never takes one of them.
ACTIVE_REASONS = frozenset({"Submitted", "Queued", "Started", "Restarting"})
# What a status means when no event says more (a record built without events).
STATUS_REASONS = {
    JobStatus.PENDING: "Submitted",
    JobStatus.RUNNING: "Started",
    JobStatus.SUCCEEDED: "Succeeded",
    JobStatus.FAILED: "Failed",
    JobStatus.CANCELLED: "Cancelled",
}


def status_reason(record: JobRecord) -> str | None:
    """The cause of a record's current status, for the wire's ``reason``.

    The newest event that changes status (not a note such as a GPU alert or staging step)
    names it: Submitted, Queued, Started, Restarting, Succeeded, Cancelled, SupervisorLost,
    DeadlineExceeded, DiskFull, ... A generic ``Failed`` whose rank exited with a non-zero
    code is ``NonZeroExit``. Without events the status's own word stands (a Pending record
    with no events says ``Submitted``; an ended job whose last such event is an active
    one, e.g. Started, says its status).
    """
    reason: str | None = None
    for event in reversed(record.events):
        if not event.reason.startswith(NOTE_REASONS):
            reason = event.reason
            break
    if reason is None or (record.status.terminal and reason in ACTIVE_REASONS):
        reason = STATUS_REASONS.get(record.status)
    if record.status is JobStatus.FAILED and reason == "Failed":
        if any(r.exit_code not in (None, 0) for r in record.ranks):
            reason = "NonZeroExit"
    return reason
