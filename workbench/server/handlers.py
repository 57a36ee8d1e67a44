"""Thin REST handlers: parse the request, call JobManager off the event loop, answer JSON.

Errors are translated in one place (``error_reply``): SpecError -> 400 with the field,
JobNotFoundError -> 404, BackendUnavailableError -> 503 with the hint; nothing ever puts a
stack trace in a response body.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.iostream import StreamClosedError

from .._spec_limits import MAX_SPEC, show
from ..errors import (
    BackendError,
    BackendUnavailableError,
    JobNotFoundError,
    MonitorUnavailableError,
    MountError,
    SpecError,
    SubmitError,
    WorkbenchError,
)
from ..manager import JobManager
from ..plan import Plan
from ..spec import JobRecord, TrainSpec, parse_statuses
from ..wirejson import dumps_strict
from ._gpu import GpuMonitor
from ._logstream import LineFeed, start_reader
from ._prometheus import render_metrics

AUTH_RESOURCE = "workbench"
# Seconds a DELETE waits (on the event loop, no thread held) for a cancelled job to end
# before it answers 202 with the record as it is.
CANCEL_REPLY_WAIT = 2.0
MAX_PAGE = 1000
MAX_INT_ARG = 2**31 - 1  # offset, tail, rank: far past any real store, within SQLite's range
MAX_BODY = 4 * MAX_SPEC  # a spec is at most MAX_SPEC as JSON; leave room for whitespace
T = TypeVar("T")


@dataclass
class WorkbenchContext:
    """What every handler shares: the one manager, its thread pool, the GPU monitor, the hub."""

    manager: JobManager
    executor: Any
    gpu: GpuMonitor
    hub: Any
    root_dir: Path
    default_runtime: str = ""
    history_seconds: float = 600.0
    dataset_stores: tuple[str, ...] = ()  # URLs the Datasets tab starts from
    max_log_followers: int = 256
    followers: int = 0
    followers_lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


def error_reply(status: int, exc: BaseException | None) -> tuple[int, dict[str, Any]]:
    """The status and JSON body for an exception (or a bare status)."""
    body: dict[str, Any]
    if isinstance(exc, SpecError):
        # 400 unless the error says otherwise (a local path outside the root folder: 403)
        status = getattr(exc, "http_status", 400)
        body = {"error": str(exc), "field": exc.field, "fix": exc.fix}
    elif isinstance(exc, JobNotFoundError):
        status, body = 404, {"error": str(exc), "name": exc.name}
    elif isinstance(exc, BackendUnavailableError):
        status, body = 503, {"error": str(exc), "backend": exc.backend, "hint": exc.hint}
    elif isinstance(exc, MonitorUnavailableError):
        status, body = 503, {"error": exc.reason, "hint": None}
    elif isinstance(exc, SubmitError):
        # A valid spec this backend cannot run now (e.g. GPUs this host lacks): a conflict
        # with the server's state, not a server fault.
        status, body = 409, {"error": str(exc), "backend": exc.backend}
    elif isinstance(exc, MountError):
        status, body = 400, {"error": str(exc), "field": "data", "fix": None}
    elif isinstance(exc, BackendError):
        status, body = 502, {"error": str(exc), "backend": exc.backend}
    elif isinstance(exc, WorkbenchError):
        status, body = 500, {"error": str(exc)}
    elif isinstance(exc, web.HTTPError):
        status = exc.status_code
        message = exc.log_message % exc.args if exc.log_message and exc.args else exc.log_message
        body = {"error": message or exc.reason or f"HTTP {status}"}
    elif exc is not None:
        status, body = 500, {"error": "internal error in the workbench server; see its log"}
    else:
        body = {"error": f"HTTP {status}"}
    body["status"] = status
    body["message"] = body["error"]  # the key JupyterLab's ServerConnection shows
    return status, body


class WorkbenchHandler(ExtensionHandlerMixin, APIHandler):
    """Base of every REST route: auth resource, JSON errors, blocking calls off the loop."""

    auth_resource = AUTH_RESOURCE

    @property
    def wb(self) -> WorkbenchContext:
        """The server's shared workbench context."""
        context: WorkbenchContext = self.settings["workbench"]
        return context

    @property
    def manager(self) -> JobManager:
        """The one JobManager."""
        return self.wb.manager

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call (store, files, processes) on the API thread pool."""
        self.wb.hub.ensure_reconciling()  # a server in use settles crashed jobs by itself
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.wb.executor, functools.partial(fn, *args, **kwargs))

    def reply(self, data: Any, status: int = 200) -> None:
        """Finish with a strict JSON body (NaN/Infinity, which JSON.parse rejects, go as null)."""
        self.set_status(status)
        self.finish(dumps_strict(data))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error is JSON from ``error_reply``; never a traceback."""
        exc_info = kwargs.get("exc_info")
        status, body = error_reply(status_code, exc_info[1] if exc_info else None)
        self.set_status(status)
        self.finish(json.dumps(body))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Expected errors are one log line; only unexpected ones keep their traceback."""
        if isinstance(value, WorkbenchError):
            self.log.info("%s %s: %s", self.request.method, self.request.path, value)
        else:
            super().log_exception(typ, value, tb)

    # ---- parameter parsing (bad input is a SpecError naming the parameter) -------------
    def int_arg(
        self, name: str, default: int | None, low: int, high: int | None = None
    ) -> int | None:
        """An integer query parameter within [low, high] (high defaults to MAX_INT_ARG)."""
        raw = self.get_argument(name, None)
        if raw is None or raw == "":
            return default
        high = MAX_INT_ARG if high is None else high
        try:
            # bounded before int(): SQLite holds 64-bit integers, and int() of a long
            # digit string is quadratic
            value = int(raw) if len(raw) <= 20 else None
        except ValueError:
            raise SpecError(
                name, f"{show(raw)} is not an integer", f"give a whole number >= {low}"
            ) from None
        if value is None or value < low or value > high:
            raise SpecError(
                name, f"{show(raw)} is out of range", f"give a number between {low} and {high}"
            )
        return value

    def float_arg(self, name: str, default: float | None) -> float | None:
        """A positive, finite number query parameter."""
        raw = self.get_argument(name, None)
        if raw is None or raw == "":
            return default
        try:
            value = float(raw) if len(raw) <= 32 else float("nan")
        except ValueError:
            raise SpecError(
                name, f"{show(raw)} is not a number", "give seconds, e.g. 300"
            ) from None
        if not value > 0 or not math.isfinite(value):
            raise SpecError(name, f"{show(raw)} is not a positive number", "give seconds, e.g. 300")
        return value

    def bool_arg(self, name: str, default: bool = False) -> bool:
        """A true/false query parameter (1/0, true/false, yes/no)."""
        raw = self.get_argument(name, None)
        if raw is None or raw == "":
            return default
        value = raw.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        raise SpecError(name, f"{raw!r} is not true or false", "give true or false")

    def json_body(self, required: bool = True) -> dict[str, Any]:
        """The request body as a JSON object (at most MAX_BODY bytes)."""
        raw = self.request.body
        if len(raw) > MAX_BODY:
            raise web.HTTPError(
                413, "body: is %d bytes, at most %d (a spec is small)", len(raw), MAX_BODY
            )
        if not raw or not raw.strip():
            if required:
                raise SpecError("body", "is empty", "send the spec as a JSON object")
            return {}
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise SpecError(
                "body", f"is not valid JSON ({show(str(e))})", "send a JSON object"
            ) from None
        except RecursionError:  # json's C decoder recurses once per bracket
            raise SpecError("body", "nests too deeply", "send a flat JSON object") from None
        if not isinstance(data, dict):
            raise SpecError(
                "body", "must be a JSON object", 'e.g. {"command": ["python", "train.py"]}'
            )
        return data

    def job_url(self, name: str) -> str:
        """Where job ``name`` lives in this API (for Location headers)."""
        return url_path_join(self.base_url, "workbench/api/jobs", quote(name, safe=""))


class JobsHandler(WorkbenchHandler):
    """GET the job list (filtered, paginated); POST a TrainSpec to submit."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Jobs, newest first: ?status=Running&status=Pending&backend=local&limit=&offset=."""
        status = parse_statuses(self.get_arguments("status"))
        backend = self.get_argument("backend", None) or None
        limit = self.int_arg("limit", 100, 1, MAX_PAGE) or 100
        offset = self.int_arg("offset", 0, 0) or 0

        def page() -> dict[str, Any]:
            records, total = self.manager.page(status, limit, offset, backend=backend)
            return {
                "jobs": [r.to_dict() for r in records],
                "total": total,
                "offset": offset,
                "limit": limit,
            }

        self.reply(await self.call(page))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        """Submit the JSON TrainSpec in the body; 201 with the record and a Location.
        ?dry_run=true: every check and the placement, nothing created; 200 with the Plan."""
        dry_run = self.bool_arg("dry_run")
        spec = self._spec(self.json_body())
        if dry_run:
            plan: Plan = await self.call(self.manager.admit, spec)
            self.reply(plan.to_dict())
            return
        record: JobRecord = await self.call(self.manager.submit, spec)
        self.set_header("Location", self.job_url(record.name))
        self.reply(record.to_dict(), status=201)

    def _spec(self, body: dict[str, Any]) -> TrainSpec:
        root = self.wb.root_dir
        options = body.get("backend_options")
        chosen = isinstance(options, dict) and "runtime" in options  # the option decides
        if self.wb.default_runtime and "runtime" not in body and not chosen:
            body["runtime"] = self.wb.default_runtime
        spec = TrainSpec.from_dict(body, base_dir=root)
        if not spec.working_dir:
            spec.working_dir = str(root)
        return spec


class JobHandler(WorkbenchHandler):
    """GET one job; DELETE cancels it (and with ?purge=true forgets it)."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        """The job's record."""
        record: JobRecord = await self.call(self.manager.get, name)
        self.reply(record.to_dict())

    @web.authenticated
    @authorized
    async def delete(self, name: str) -> None:
        """Cancel the job without holding a pool thread while it stops: 200 with the record
        when it ended within a moment, else 202 (the backend finishes the stop on its own);
        ?purge=true also deletes it once it has ended (204)."""
        purge = self.bool_arg("purge")
        record: JobRecord = await self.call(self.manager.cancel, name, wait=0)
        # Poll on the event loop, one short call at a time: a job that ignores SIGTERM
        # keeps no thread busy for its grace period.
        patience = CANCEL_REPLY_WAIT
        if purge:
            patience = self.manager.settings.stop_grace + CANCEL_REPLY_WAIT + 10
        deadline = time.monotonic() + patience
        delay = 0.02
        while not record.status.terminal and time.monotonic() < deadline:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
            record = await self.call(self.manager.get, name)
        if purge:
            await self.call(self.manager.delete, name)  # 400 when it still has not ended
            self.set_status(204)
            self.finish()
            return
        self.reply(record.to_dict(), 200 if record.status.terminal else 202)


class JobLogsHandler(WorkbenchHandler):
    """GET one rank's log (or every rank's) as text; ?follow=true streams until the job ends."""

    def rank_arg(self) -> int | None:
        """?rank=N (default 0), or ?rank=all for every rank, each line prefixed [rank N]."""
        raw = (self.get_argument("rank", None) or "").strip()
        if raw.lower() == "all":
            return None
        if raw and not raw.isdigit():
            raise SpecError("rank", f"{raw!r} is not a rank", "give a number >= 0, or all")
        return self.int_arg("rank", 0, 0) or 0

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        """?rank=0|all&tail=100&follow=true; text/plain, one line per log line."""
        rank = self.rank_arg()
        tail = self.int_arg("tail", None, 0)
        follow = self.bool_arg("follow")
        feed = LineFeed(asyncio.get_running_loop())
        # Raises 404/400 before any byte is sent; the reader watches feed.stopped per block.
        lines = await self.call(
            self.manager.logs, name, rank=rank, follow=follow, tail=tail, stop=feed.stopped
        )
        with self.wb.followers_lock:
            if self.wb.followers >= self.wb.max_log_followers:
                raise web.HTTPError(503, "too many log streams are open; retry shortly")
            self.wb.followers += 1
        self._feed = feed
        try:
            self.set_header("Content-Type", "text/plain; charset=utf-8")
            self.set_header("Cache-Control", "no-cache")
            self.set_header("X-Accel-Buffering", "no")  # stream through nginx/JupyterHub proxies
            which = "all" if rank is None else rank
            start_reader(lines, feed, name=f"workbench-logs-{name}-{which}")
            async for batch in feed.batches():
                self.write("\n".join(batch) + "\n")
                # Wait for the client before taking more: a slow reader holds the reader
                # thread back (bounded feed) instead of filling the server's memory.
                await self.flush()
            if feed.error is not None:
                self.log.warning(
                    "log stream of %s rank %s ended early: %s", name, which, feed.error
                )
            self.finish(set_content_type="text/plain; charset=utf-8")  # APIHandler's is JSON
        except StreamClosedError:
            pass  # the client went away
        finally:
            feed.stop()
            with self.wb.followers_lock:
                self.wb.followers -= 1

    def on_connection_close(self) -> None:
        """Tell the reader thread to stop when the client disconnects."""
        feed = getattr(self, "_feed", None)
        if feed is not None:
            feed.stop()
            feed.close()
        super().on_connection_close()


class JobMetricsHandler(WorkbenchHandler):
    """GET a job's training scalars and GPU samples."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        """?limit=N keeps the newest N of each series; ?since=CURSOR (the ``cursor`` of an
        earlier answer, empty for the start) returns only what came after it."""
        limit = self.int_arg("limit", None, 1)
        since = self.get_query_argument("since", None)
        self.reply(await self.call(self.manager.metrics, name, limit=limit, since=since))


class JobRerunHandler(WorkbenchHandler):
    """POST: submit the exact spec and script snapshot of a job again, as a new job."""

    @web.authenticated
    @authorized
    async def post(self, name: str) -> None:
        """Body (optional): {"name": "new-name"}; 201 with the new record and a Location."""
        body = self.json_body(required=False)
        unknown = sorted(set(body) - {"name"})
        if unknown:
            raise SpecError(unknown[0], "unknown field", "the body may only give a new name")
        new_name = body.get("name")
        if new_name is not None and not isinstance(new_name, str):
            raise SpecError("name", "must be a string", "give the new job's name")
        record: JobRecord = await self.call(self.manager.rerun, name, new_name=new_name)
        self.set_header("Location", self.job_url(record.name))
        self.reply(record.to_dict(), status=201)


class GpusHandler(WorkbenchHandler):
    """GET the host's GPU samples and history, or the monitor's state when there are none."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """?seconds=N of history (default: the server's gpu_history_seconds); ?history=false."""
        seconds = self.float_arg("seconds", self.wb.history_seconds)
        with_history = self.bool_arg("history", True)
        self.reply(await self.call(self.wb.gpu.snapshot, seconds, with_history))


class NodesHandler(WorkbenchHandler):
    """GET hosts, their GPUs and what holds them (`workbench top`)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """?backend=NAME (default: the server's default backend)."""
        backend = self.get_argument("backend", None) or None
        nodes = await self.call(self.manager.nodes, backend)
        self.reply({"nodes": [n.to_dict() for n in nodes]})


class BackendsHandler(WorkbenchHandler):
    """GET every backend the registry knows, with its capabilities."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """{"backends": [{name, default, capabilities, error, hint}]}."""
        self.reply({"backends": await self.call(self.manager.backends)})


class DatasetsHandler(WorkbenchHandler):
    """GET a listing of a data URL (s3://, oss://, a local path) through workbench.data."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """?url=s3://bucket/prefix: the entries under it."""
        url = self.get_argument("url", "").strip()
        if not url:
            raise SpecError(
                "url", "is required", "give the URL to browse, e.g. ?url=s3://bucket/data"
            )
        try:
            # Looked up at run time: the data package lands separately and is optional here.
            ls = importlib.import_module("workbench.data").ls
        except (ImportError, AttributeError):
            raise BackendUnavailableError(
                "data",
                "dataset browsing is not available in this install (workbench.data.ls is missing)",
                "upgrade jupyter-gpu-workbench to a version with the data package",
            ) from None
        from ._datasets import check_local_url  # here, not at the top: _datasets imports us

        await self.call(check_local_url, url, self.wb, self.manager.settings)
        try:
            entries = await self.call(ls, url, settings=self.manager.settings)
        except MountError as e:  # unknown scheme, missing bucket, no access: about this URL
            raise SpecError("url", str(e), "check the URL and the storage credentials") from None
        self.reply({"url": url, "entries": [_plain(e) for e in entries]})


def _plain(entry: Any) -> Any:
    """A listing entry as JSON (Entry.to_dict, or the value itself when already plain)."""
    return (
        entry.to_dict() if hasattr(entry, "to_dict") else json.loads(json.dumps(entry, default=str))
    )


class ImagesHandler(WorkbenchHandler):
    """GET the image catalogue."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Images by name with their tags and references."""
        images = self.manager.catalog.images
        self.reply({"images": [dataclasses.asdict(i) for i in images.values()]})


class SpecsHandler(WorkbenchHandler):
    """GET the instance specs and their prices."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Specs by name: GPUs, vCPUs, memory, price per hour."""
        self.reply({"specs": [s.to_dict() for s in self.manager.catalog.specs.values()]})


class PrometheusHandler(WorkbenchHandler):
    """GET ``{base_url}workbench/metrics``: Prometheus text (GPU gauges, jobs by state)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """The exposition text, version 0.0.4."""
        counts = await self.call(self.manager.counts)
        text, content_type = await self.call(render_metrics, counts, self.wb.gpu)
        self.finish(text, set_content_type=content_type)
