"""Wire types beyond the job model, for workbench.wireschema: the TrainSpec request body of
POST /jobs, GPU state, nodes, the catalogue, metrics and dataset listings.

Each TypedDict describes what a route writes today (or, for TrainSpec, what the server
accepts); bounds come from workbench._spec_limits so the schema and the checks share them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field
from typing_extensions import NotRequired, TypedDict

from ._spec_limits import (
    MAX_ARG,
    MAX_ARGS,
    MAX_COMMAND,
    MAX_CPU,
    MAX_ENV,
    MAX_ENV_NAME,
    MAX_ENV_VALUE,
    MAX_LABEL,
    MAX_MOUNTS,
    MAX_PROCS,
    MAX_RETRIES,
    MAX_STRING,
    MAX_TIMEOUT,
    MAX_WORKERS,
)

# Spelled out so type checkers see them; tests/test_wireschema.py checks they match the code.
MonitorStateName = Literal[
    "ok", "no_library", "no_driver", "no_gpu", "no_permission", "disabled", "error", "unavailable"
]
FrameworkName = Literal["pytorch", "tensorflow", "mpi", "plain"]
RuntimeName = Literal["auto", "process", "container", "pod"]
# The same patterns as spec.DNS1123, spec.MEMORY, _spec_limits.DURATION and ENV_NAME, in
# the ECMA-262 form JSON Schema uses (no \Z).
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
MEMORY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$"
DURATION_PATTERN = (
    r"^\s*([0-9]+(\.[0-9]+)?|([0-9]+(\.[0-9]+)?h)?([0-9]+(\.[0-9]+)?m)?([0-9]+(\.[0-9]+)?s)?)\s*$"
)
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


def _d(text: str, **constraints: Any) -> Any:
    """A field's description (every wire field has one) and its JSON Schema bounds."""
    default = constraints.pop("default", ...)
    extra = {"default": default} if default is not ... else None
    return Field(description=text, json_schema_extra=extra, **constraints)


# ---- the request body of POST /workbench/api/jobs ---------------------------------------


class Mount(TypedDict):
    """A data or outputs mount as an object (the string form SRC:DST[:ro|rw] says the same)."""

    src: Annotated[
        str, _d("a local path or an fsspec URL (s3://, oss://, ...)", max_length=MAX_STRING)
    ]
    dst: Annotated[
        str, _d("where the ranks see it (relative: under working_dir)", max_length=MAX_STRING)
    ]
    mode: NotRequired[Annotated[Literal["ro", "rw"], _d("read-only or read-write", default="ro")]]


MountItem = Annotated[str, Field(min_length=3, max_length=2 * MAX_STRING + 8)] | Mount


class TrainSpec(TypedDict):
    """A training job request (POST /workbench/api/jobs). Field names follow Kubeflow where
    they overlap; an unknown field is refused with 400 naming it."""

    command: Annotated[
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=MAX_ARG)]],
            Field(min_length=1, max_length=MAX_ARGS),
        ]
        | Annotated[str, Field(min_length=1, max_length=MAX_COMMAND)],
        _d("the program and its arguments; a string is split as a shell would"),
    ]
    name: NotRequired[
        Annotated[
            str | None,
            _d(
                "the job's name: DNS-1123, at most 50 characters (default: generated)",
                max_length=50,
                pattern=NAME_PATTERN,
            ),
        ]
    ]
    image: NotRequired[
        Annotated[
            str,
            _d(
                "a catalogue name[:tag] (GET images) or a full image reference",
                default="pytorch",
                min_length=1,
                max_length=MAX_STRING,
            ),
        ]
    ]
    workers: NotRequired[
        Annotated[int, _d("workers (nodes) in the gang", default=1, ge=1, le=MAX_WORKERS)]
    ]
    gpus: NotRequired[
        Annotated[
            float,
            _d(
                "GPUs per worker (Arena's --gpus): 0 for CPU only, a fraction below 1 shares"
                " one GPU, above 1 whole GPUs; at most what instance_spec offers",
                default=0,
                ge=0,
            ),
        ]
    ]
    gpus_per_worker: NotRequired[
        Annotated[float, _d("the same as gpus, by the name a JobRecord uses (not both)", ge=0)]
    ]
    procs_per_worker: NotRequired[
        Annotated[
            int | None,
            _d(
                "processes per worker (torchrun's nproc_per_node; default: one per whole GPU, else 1)",
                ge=1,
                le=MAX_PROCS,
            ),
        ]
    ]
    nproc_per_node: NotRequired[
        Annotated[int | None, _d("alias of procs_per_worker", ge=1, le=MAX_PROCS)]
    ]
    nprocPerNode: NotRequired[
        Annotated[int | None, _d("alias of procs_per_worker (Kubeflow)", ge=1, le=MAX_PROCS)]
    ]
    instance_spec: NotRequired[
        Annotated[
            str | None,
            _d(
                "an instance spec from GET specs (default: the cheapest that fits gpus)",
                max_length=MAX_LABEL,
            ),
        ]
    ]
    spec: NotRequired[
        Annotated[str | None, _d("alias of instance_spec (Arena)", max_length=MAX_LABEL)]
    ]
    cpu: NotRequired[Annotated[float | None, _d("vCPUs per worker", gt=0, le=MAX_CPU)]]
    memory: NotRequired[
        Annotated[
            str | None,
            _d(
                "memory per worker as a quantity, e.g. 16Gi or 512Mi",
                max_length=MAX_LABEL,
                pattern=MEMORY_PATTERN,
            ),
        ]
    ]
    framework: NotRequired[
        Annotated[FrameworkName | None, _d("the distributed env contract (default: the image's)")]
    ]
    data: NotRequired[
        Annotated[
            list[MountItem] | None,
            _d(
                "data mounts SRC:DST[:ro|rw], e.g. s3://bucket/imagenet:/data",
                max_length=MAX_MOUNTS,
            ),
        ]
    ]
    outputs: NotRequired[
        Annotated[
            list[MountItem] | None,
            _d("outputs URL:DST, written back when the job ends", max_length=MAX_MOUNTS),
        ]
    ]
    env: NotRequired[
        Annotated[
            Annotated[
                dict[str, Annotated[str, Field(max_length=MAX_ENV_VALUE)] | float | bool],
                Field(
                    max_length=MAX_ENV,
                    json_schema_extra={
                        "propertyNames": {"pattern": ENV_NAME_PATTERN, "maxLength": MAX_ENV_NAME}
                    },
                ),
            ]
            | None,
            _d(
                "environment NAME: value for every rank (numbers and booleans become text;"
                " names workbench sets, e.g. RANK, are refused)"
            ),
        ]
    ]
    working_dir: NotRequired[
        Annotated[
            str | None,
            _d(
                "the ranks' working directory, relative to the Jupyter root_dir (default: it)",
                max_length=MAX_STRING,
            ),
        ]
    ]
    workdir: NotRequired[Annotated[str | None, _d("alias of working_dir", max_length=MAX_STRING)]]
    workingDir: NotRequired[
        Annotated[str | None, _d("alias of working_dir (Kubeflow)", max_length=MAX_STRING)]
    ]
    max_retries: NotRequired[
        Annotated[int, _d("times a failed attempt is retried", default=0, ge=0, le=MAX_RETRIES)]
    ]
    retry: NotRequired[Annotated[int, _d("alias of max_retries (Arena)", ge=0, le=MAX_RETRIES)]]
    timeout: NotRequired[
        Annotated[
            Annotated[float, Field(gt=0, le=MAX_TIMEOUT)]
            | Annotated[str, Field(max_length=64, pattern=DURATION_PATTERN)]
            | None,
            _d("the job's deadline: seconds, or a duration such as 30m, 2h, 1h30m"),
        ]
    ]
    priority: NotRequired[Annotated[str | None, _d("a priority class name", max_length=MAX_LABEL)]]
    queue: NotRequired[
        Annotated[str | None, _d("a queue name (cluster backends)", max_length=MAX_LABEL)]
    ]
    backend: NotRequired[
        Annotated[
            str | None,
            _d("a backend from GET backends (default: the server's)", max_length=MAX_LABEL),
        ]
    ]
    runtime: NotRequired[
        Annotated[
            RuntimeName,
            _d(
                "how workers run: auto (local: containers when an engine answers), process or"
                " container (local), pod (kubernetes)",
                default="auto",
            ),
        ]
    ]
    backend_options: NotRequired[
        Annotated[
            dict[str, Any],
            _d(
                "backend-specific options, checked by that backend (GET backends lists them):"
                " local takes runtime=process|container",
            ),
        ]
    ]


# An example a client can post as it is: it runs anywhere (no GPU, no container engine).
TRAIN_SPEC_EXAMPLE: dict[str, Any] = {
    "name": "hello-ddp",
    "command": ["python", "-c", "import os; print('rank', os.environ['RANK'])"],
    "image": "pytorch",
    "workers": 2,
    "gpus": 0,
    "env": {"LR": "0.1"},
    "max_retries": 1,
    "timeout": "10m",
    "runtime": "process",
}


class RerunRequest(TypedDict):
    """The optional body of POST /workbench/api/jobs/{name}/rerun."""

    name: NotRequired[Annotated[str, _d("the new job's name (default NAME-rN)", max_length=50)]]


# ---- GPUs (GET gpus, the event stream's gpu messages) -----------------------------------


class GpuProcess(TypedDict):
    """A process using a GPU."""

    pid: Annotated[int, _d("its process ID on the GPU's host")]
    memory: Annotated[int | None, _d("GPU memory it uses, bytes, or null when not reported")]
    rank: NotRequired[Annotated[int | None, _d("the job's rank it belongs to (a job's records)")]]


class GpuSample(TypedDict):
    """One reading of one GPU; a figure is null where the GPU does not report it."""

    index: Annotated[int, _d("the GPU's index on its host")]
    uuid: Annotated[str | None, _d("the GPU's UUID, or null when unknown")]
    name: Annotated[str, _d("the GPU's model name")]
    time: Annotated[float, _d("Unix time of the reading")]
    utilization: Annotated[float | None, _d("percent of the last period the GPU was busy")]
    memory_used: Annotated[int | None, _d("GPU memory in use, bytes")]
    memory_total: Annotated[int | None, _d("GPU memory in all, bytes")]
    temperature: Annotated[float | None, _d("degrees C")]
    power: Annotated[float | None, _d("power draw, W")]
    power_limit: Annotated[float | None, _d("the enforced power limit, W")]
    sm_clock: Annotated[int | None, _d("SM clock, MHz")]
    processes: Annotated[list[GpuProcess] | None, _d("processes using it, or null")]
    ecc_errors: Annotated[int | None, _d("volatile uncorrected ECC errors since the driver loaded")]
    xid: Annotated[int | None, _d("an XID error code seen since the previous reading")]
    error: Annotated[str | None, _d("why the GPU stopped answering (e.g. fell off the bus)")]


class Alert(TypedDict):
    """One alert on one GPU; cleared is null while it is active."""

    kind: Annotated[
        Literal["temperature", "memory", "idle", "xid", "ecc", "gpu_lost"], _d("what it is about")
    ]
    gpu: Annotated[int, _d("the GPU's index")]
    uuid: Annotated[str | None, _d("the GPU's UUID, or null when unknown")]
    level: Annotated[Literal["warning", "error"], _d("how much it matters")]
    message: Annotated[str, _d("what is wrong, in plain words")]
    value: Annotated[float | None, _d("the figure that raised it")]
    threshold: Annotated[float | None, _d("the rule's threshold")]
    since: Annotated[float, _d("Unix time it was raised")]
    cleared: Annotated[float | None, _d("Unix time it cleared, or null while active")]


class GpuState(TypedDict):
    """The host's GPUs from the server's one sampler (GET /workbench/api/gpus)."""

    state: Annotated[
        MonitorStateName, _d("the monitor's state; unavailable (with a reason) without a sampler")
    ]
    reason: Annotated[str | None, _d("why monitoring is off, in plain words, or null")]
    gpus: Annotated[list[GpuSample], _d("the newest sample of each GPU")]
    history: Annotated[
        dict[str, list[GpuSample]], _d("samples of the last seconds by GPU index, oldest first")
    ]
    alerts: Annotated[list[Alert], _d("alerts the monitor raises now")]


# ---- nodes (GET nodes, `workbench top`) ------------------------------------------------


class GpuHolder(TypedDict):
    """A rank holding (a share of) a GPU."""

    job: Annotated[str, _d("the job's name")]
    rank: Annotated[int, _d("the rank")]
    share: Annotated[float, _d("the part of the GPU it holds (1 = whole)")]


class NodeGpu(TypedDict):
    """One GPU of a node, its allocation and live figures."""

    index: Annotated[int, _d("the GPU's index on the node")]
    uuid: Annotated[str | None, _d("the GPU's UUID, or null when unknown")]
    name: Annotated[str, _d("the GPU's model name")]
    memory_total: Annotated[int | None, _d("GPU memory, bytes")]
    allocated: Annotated[float, _d("GPUs' worth held by jobs (shares add up)")]
    holders: Annotated[list[GpuHolder], _d("the ranks holding it")]
    utilization: Annotated[float | None, _d("live busy percent, or null")]
    memory_used: Annotated[int | None, _d("live memory in use, bytes, or null")]
    temperature: Annotated[float | None, _d("live degrees C, or null")]


class NodeJob(TypedDict):
    """An active job on a node."""

    name: Annotated[str, _d("the job's name")]
    status: Annotated[str, _d("its status")]
    gpus_total: Annotated[float, _d("GPUs in the whole job (gpus_per_worker x workers)")]


class NodeInfo(TypedDict):
    """A host (or cluster node), its GPUs and which jobs hold them (Backend.nodes())."""

    name: Annotated[str, _d("the host or node name")]
    backend: Annotated[str, _d("the backend that reports it")]
    cpu_count: Annotated[int | None, _d("vCPUs")]
    memory_total: Annotated[int | None, _d("memory, bytes, or null when unknown")]
    gpus: Annotated[list[NodeGpu], _d("its GPUs (empty when none; gpu_reason says why)")]
    gpu_reason: Annotated[str | None, _d("why it has no usable GPUs, or null")]
    active_jobs: Annotated[list[NodeJob], _d("jobs pending or running there")]
    labels: Annotated[dict[str, str], _d("node labels (cluster backends), else empty")]


class NodeList(TypedDict):
    """GET /workbench/api/nodes."""

    nodes: Annotated[list[NodeInfo], _d("the backend's hosts or nodes")]


# ---- the catalogue (GET images, GET specs) ----------------------------------------------


class ImageInfo(TypedDict):
    """A named image of the catalogue."""

    name: Annotated[str, _d("the name a spec's image takes, e.g. pytorch")]
    framework: Annotated[FrameworkName, _d("the env contract its jobs get")]
    description: Annotated[str, _d("what is in it")]
    default_tag: Annotated[str, _d("the tag used when a spec names no tag")]
    tags: Annotated[dict[str, str], _d("tag -> full image reference")]


class ImageList(TypedDict):
    """GET /workbench/api/images."""

    images: Annotated[list[ImageInfo], _d("every image of the catalogue")]


class InstanceSpec(TypedDict):
    """A priced machine shape for one worker."""

    name: Annotated[str, _d("the name a spec's instance_spec takes, e.g. gpu.1x")]
    gpus_per_worker: Annotated[float, _d("GPUs each worker gets (a fraction shares one)")]
    gpu_model: Annotated[str | None, _d("the GPU model, or null")]
    gpu_memory: Annotated[str | None, _d("GPU memory as a quantity, e.g. 80Gi, or null")]
    cpu: Annotated[int, _d("vCPUs per worker")]
    memory: Annotated[str, _d("memory per worker as a quantity, e.g. 64Gi")]
    price_per_hour: Annotated[float, _d("price per worker-hour")]
    shared: Annotated[bool, _d("whether the GPU is shared with other jobs")]


class SpecList(TypedDict):
    """GET /workbench/api/specs."""

    specs: Annotated[list[InstanceSpec], _d("every instance spec of the catalogue")]


# ---- metrics (GET jobs/{name}/metrics) ------------------------------------------------


class ScalarRecord(TypedDict):
    """One workbench.run.log() record; every other key is a scalar the script named."""

    time: Annotated[float, _d("Unix time it was logged")]
    rank: Annotated[int, _d("the rank that logged it")]
    step: Annotated[int | float | str | None, _d("the step, or null")]
    total: Annotated[int | float | str | None, _d("the steps in all, or null")]


class GpuRecord(GpuSample):
    """A GPU sample a job recorded, tied to its ranks where known."""

    rank: NotRequired[Annotated[int | list[int] | None, _d("the rank(s) on that GPU")]]


class Metrics(TypedDict):
    """A job's reported metrics, oldest first (JobManager.metrics)."""

    scalars: Annotated[list[ScalarRecord], _d("training scalars from workbench.run.log()")]
    gpu: Annotated[list[GpuRecord], _d("GPU samples of the job's GPUs")]
    cursor: Annotated[
        str, _d("where this answer ended: pass it as since= to get only newer records")
    ]


# ---- live metrics over the event stream (workbench/server/_livemetrics.py) ------------


class ClientSubscribe(TypedDict):
    """Client -> server on the event stream: push this job's metrics as it reports them."""

    type: Annotated[Literal["subscribe"], _d("subscribe")]
    metrics: Annotated[str, _d("the job whose metrics to follow")]
    since: NotRequired[
        Annotated[
            str | None,
            _d('the cursor of the last metrics frame seen ("" or absent: from the start)'),
        ]
    ]


class ClientUnsubscribe(TypedDict):
    """Client -> server on the event stream: stop pushing this job's metrics."""

    type: Annotated[Literal["unsubscribe"], _d("unsubscribe")]
    metrics: Annotated[str, _d("the job to stop following")]


class EventMetrics(TypedDict):
    """What a subscribed job reported since the last frame (sent only when there is news)."""

    type: Annotated[Literal["metrics"], _d("metrics")]
    name: Annotated[str, _d("the job")]
    cursor: Annotated[str, _d("where this frame ended: subscribe with it as since to resume")]
    scalars: Annotated[list[ScalarRecord], _d("new training scalars, oldest first")]
    gpu: Annotated[list[GpuRecord], _d("new GPU samples of the job's GPUs")]


class EventError(TypedDict):
    """A client frame the server could not serve; the connection stays open."""

    type: Annotated[Literal["error"], _d("error")]
    field: Annotated[str, _d("the offending field of the client frame (frame: the whole)")]
    error: Annotated[str, _d("what went wrong, in plain words")]
    fix: Annotated[str | None, _d("how to fix it")]


# ---- datasets (GET datasets) ---------------------------------------------------------


class DatasetEntry(TypedDict):
    """One object or folder under a data URL."""

    name: Annotated[str, _d("its full name, scheme://bucket/... for a store")]
    type: Annotated[Literal["file", "directory"], _d("a file (object) or a folder (prefix)")]
    size: Annotated[int, _d("bytes (0 for a folder)")]
    modified: Annotated[str, _d("last modified time as the store gives it, or empty")]


class DatasetListing(TypedDict):
    """GET /workbench/api/datasets?url=..."""

    url: Annotated[str, _d("the URL listed")]
    entries: Annotated[list[DatasetEntry], _d("the objects and folders directly under it")]


class DatasetStore(TypedDict):
    """A store the Datasets tab offers (WorkbenchApp.dataset_stores)."""

    url: Annotated[str, _d("the store's URL or local folder")]
    scheme: Annotated[str, _d("s3, oss, gs, nas, file, ...")]


class DatasetStores(TypedDict):
    """GET /workbench/api/datasets/stores."""

    stores: Annotated[list[DatasetStore], _d("the configured stores, else the server's root")]


class DatasetUsage(TypedDict):
    """GET /workbench/api/datasets/usage?url=... (`workbench data du`)."""

    url: Annotated[str, _d("the URL sized up")]
    bytes: Annotated[int, _d("total bytes of the objects under it")]
    files: Annotated[int, _d("how many objects are under it")]


class DatasetPreview(TypedDict):
    """GET /workbench/api/datasets/preview?url=... (`workbench data head`)."""

    url: Annotated[str, _d("the file previewed")]
    lines: Annotated[int, _d("the rows or lines asked for")]
    preview: Annotated[str, _d("its first rows (CSV, Parquet) or lines, or a note on binary")]


# Open records: the script names its scalars (numbers, text, true/false, null).
OPEN = {"ScalarRecord": {"type": ["number", "string", "boolean", "null"]}}
TYPES: tuple[type, ...] = (
    TrainSpec,
    RerunRequest,
    GpuState,
    NodeList,
    ImageList,
    SpecList,
    Metrics,
    ClientSubscribe,
    ClientUnsubscribe,
    EventMetrics,
    EventError,
    DatasetListing,
    DatasetStores,
    DatasetUsage,
    DatasetPreview,
)
