"""The ``workbench`` ExtensionApp: configuration traits, the shared context, the routes."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from jupyter_server.extension.application import ExtensionApp
from traitlets import Float, Int, List, TraitError, Unicode, validate

from ..manager import JobManager
from ..settings import Settings
from ._datasets import DatasetPreviewHandler, DatasetStoresHandler, DatasetUsageHandler
from ._gpu import GpuMonitor
from .events import EventHub, EventStreamHandler
from .handlers import (
    BackendsHandler,
    DatasetsHandler,
    GpusHandler,
    ImagesHandler,
    JobHandler,
    JobLogsHandler,
    JobMetricsHandler,
    JobRerunHandler,
    JobsHandler,
    NodesHandler,
    PrometheusHandler,
    SpecsHandler,
    WorkbenchContext,
)

API = "workbench/api"
JOB = r"(?P<name>[^/]+)"


class WorkbenchApp(ExtensionApp):
    """Serves ``{base_url}workbench/api/...`` and ``{base_url}workbench/metrics``."""

    name = "workbench"
    load_other_extensions = True

    default_backend = Unicode(
        "",
        config=True,
        help="Backend that jobs without a `backend` field run on (e.g. 'local'). "
        "Empty: WORKBENCH_BACKEND, then the user config file, then 'local'.",
    )
    default_runtime = Unicode(
        "",
        config=True,
        help="Runtime given to submitted specs that name none: 'process', 'container' or "
        "'auto'. Empty: the spec's default ('auto': containers when an engine answers).",
    )
    catalog_file = Unicode(
        "",
        config=True,
        help="YAML file of images and instance specs that adds to or replaces entries of the "
        "packaged catalogue. Empty: WORKBENCH_CATALOG or the user config's catalog_file.",
    )
    workbench_home = Unicode(
        "",
        config=True,
        help="Folder holding the job store and job folders. Empty: WORKBENCH_HOME or "
        "~/.local/share/workbench, so the CLI and kernels see the same jobs.",
    )
    job_poll_interval = Float(
        1.0,
        config=True,
        help="Seconds between checks that active jobs' runners are alive (a runner killed "
        "with SIGKILL writes nothing, so this look catches it).",
    )
    job_feed_interval = Float(
        0.25,
        config=True,
        help="Seconds between the event stream's looks at the store's change feed (one "
        "watcher for all clients; a look costs one tiny query when nothing changed). "
        "Never longer than job_poll_interval.",
    )
    gpu_sample_interval = Float(
        None,
        allow_none=True,
        config=True,
        help="Seconds between GPU samples taken by the server's single host sampler. "
        "None: the monitor's default (1 s).",
    )
    gpu_history_seconds = Float(
        600.0,
        config=True,
        help="Seconds of GPU history that GET gpus returns when the request names no window.",
    )
    alert_gpu_temperature = Float(
        None,
        allow_none=True,
        config=True,
        help="GPU temperature (degrees Celsius) at or above which the monitor raises an alert. "
        "None: the monitor's default (WORKBENCH_GPU_ALERTS, else 85).",
    )
    alert_gpu_memory_percent = Float(
        None,
        allow_none=True,
        config=True,
        help="Percent of GPU memory in use at or above which the monitor raises an alert. "
        "None: the monitor's default (WORKBENCH_GPU_ALERTS, else 95).",
    )
    dataset_stores = List(
        Unicode(),
        default_value=[],
        config=True,
        help="Data URLs the panel's Datasets tab offers to browse (s3://bucket/prefix, "
        "oss://..., a local folder). Empty: the server's root folder.",
    )
    api_threads = Int(
        16,
        config=True,
        help="Worker threads for blocking JobManager calls (store queries, cancel, submit), "
        "so they never run on the server's event loop.",
    )
    max_log_followers = Int(
        256,
        config=True,
        help="Most log streams followed at once; each holds one reader thread. "
        "Requests beyond it get 503 and should retry.",
    )

    @validate(
        "job_poll_interval",
        "job_feed_interval",
        "gpu_sample_interval",
        "gpu_history_seconds",
        "alert_gpu_temperature",
    )
    def _positive(self, proposal: dict[str, Any]) -> float | None:
        if proposal["value"] is None:
            return None
        value = float(proposal["value"])
        if value <= 0:
            raise TraitError(f"WorkbenchApp.{proposal['trait'].name} must be > 0, got {value}")
        return value

    @validate("alert_gpu_memory_percent")
    def _percent(self, proposal: dict[str, Any]) -> float | None:
        if proposal["value"] is None:
            return None
        value = float(proposal["value"])
        if not 0 < value <= 100:
            raise TraitError(
                f"WorkbenchApp.alert_gpu_memory_percent must be in (0, 100], got {value}"
            )
        return value

    @validate("api_threads", "max_log_followers")
    def _count(self, proposal: dict[str, Any]) -> int:
        value = int(proposal["value"])
        if value < 1:
            raise TraitError(f"WorkbenchApp.{proposal['trait'].name} must be >= 1, got {value}")
        return value

    def initialize_settings(self) -> None:
        """Build the one manager, thread pool, GPU monitor and event hub this server shares."""
        settings = Settings.load(
            home=self.workbench_home or None,
            backend=self.default_backend or None,
            catalog_file=self.catalog_file or None,
        )
        manager = JobManager(settings)
        executor = ThreadPoolExecutor(self.api_threads, thread_name_prefix="workbench-api")
        gpu = GpuMonitor(
            interval=self.gpu_sample_interval,
            temperature_alert=self.alert_gpu_temperature,
            memory_alert=self.alert_gpu_memory_percent,
        )
        hub = EventHub(
            manager,
            executor,
            gpu,
            poll_interval=self.job_poll_interval,
            feed_interval=self.job_feed_interval,
        )
        assert self.serverapp is not None
        root = Path(self.serverapp.root_dir).expanduser().resolve()
        self._context = WorkbenchContext(
            manager=manager,
            executor=executor,
            gpu=gpu,
            hub=hub,
            root_dir=root,
            default_runtime=self.default_runtime,
            history_seconds=self.gpu_history_seconds,
            max_log_followers=self.max_log_followers,
            dataset_stores=tuple(self.dataset_stores),
        )
        self.settings["workbench"] = self._context
        self.log.info("workbench: jobs in %s, default backend %s", settings.home, settings.backend)

    def initialize_handlers(self) -> None:
        """Register every route under the server's base_url (the ExtensionApp prefixes it)."""
        routes: list[tuple[str, type]] = [
            (f"{API}/jobs", JobsHandler),
            (f"{API}/jobs/{JOB}", JobHandler),
            (f"{API}/jobs/{JOB}/logs", JobLogsHandler),
            (f"{API}/jobs/{JOB}/metrics", JobMetricsHandler),
            (f"{API}/jobs/{JOB}/rerun", JobRerunHandler),
            (f"{API}/gpus", GpusHandler),
            (f"{API}/nodes", NodesHandler),
            (f"{API}/backends", BackendsHandler),
            (f"{API}/datasets", DatasetsHandler),
            (f"{API}/datasets/stores", DatasetStoresHandler),
            (f"{API}/datasets/usage", DatasetUsageHandler),
            (f"{API}/datasets/preview", DatasetPreviewHandler),
            (f"{API}/images", ImagesHandler),
            (f"{API}/specs", SpecsHandler),
            (f"{API}/events", EventStreamHandler),
            ("workbench/metrics", PrometheusHandler),
        ]
        self.handlers.extend(routes)

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        """Once the loop runs: settle jobs whose supervisor died, even before any request."""
        context = getattr(self, "_context", None)
        if context is not None:
            context.hub.ensure_reconciling()

    async def stop_extension(self) -> None:
        """Stop the watcher, the sampler subscription and the thread pool."""
        context = getattr(self, "_context", None)
        if context is None:
            return
        await context.hub.stop()
        context.gpu.stop()
        # Followers' reader threads are daemons; do not wait for them on shutdown.
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: context.executor.shutdown(wait=False, cancel_futures=True)
        )
