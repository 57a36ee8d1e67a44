"""One event stream for every open panel: job changes, GPU samples and alerts.

A single watcher task polls the job store (one tiny ``PRAGMA data_version`` query per tick
when nothing changed) and the single host sampler pushes GPU samples; both fan out to all
WebSocket clients. No client ever causes its own polling of backends or NVML.

Messages (JSON text frames):
``{"type": "hello", "jobs": {status: n}, "gpu": {"state", "reason"}}`` on connect;
``{"type": "job", "job": <JobRecord wire model>}`` when a job appears or changes;
``{"type": "job_deleted", "name": ...}``;
``{"type": "gpu", "state", "reason", "gpus": [...], "alerts": [...]}`` per sample.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from ..manager import JobManager
from ..spec import JobRecord
from ..wirejson import dumps_strict
from ._gpu import GpuMonitor

log = logging.getLogger(__name__)

# Fields that change every second for a running job; clients compute them from the rest.
VOLATILE = ("elapsed", "cost")


def _signature(record: JobRecord) -> str:
    wire = record.to_dict()
    for key in VOLATILE:
        wire.pop(key, None)
    return json.dumps(wire, sort_keys=True, default=str)


class _StoreChanges:
    """Whether the job store (every backend's jobs) changed since the last look, for one
    tiny query."""

    def __init__(self, manager: JobManager) -> None:
        self.manager = manager
        self._conn: sqlite3.Connection | None = None

    def token(self) -> int | None:
        """SQLite's data_version of the store (changes on every commit by another connection)."""
        path = self.manager.store.path  # the manager's one store, whatever the backend
        try:
            if self._conn is None:
                if not path.exists():
                    return None
                self._conn = sqlite3.connect(
                    f"file:{path}?mode=ro", uri=True, timeout=5, check_same_thread=False
                )
            return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        except sqlite3.Error:
            self.close()
            return None

    def close(self) -> None:
        """Drop the read-only connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class EventHub:
    """Owns the one job watcher and the sampler subscription; fans messages out."""

    def __init__(
        self,
        manager: JobManager,
        executor: Any,
        gpu: GpuMonitor,
        poll_interval: float = 1.0,
        full_refresh_interval: float = 10.0,
    ) -> None:
        self.manager = manager
        self.executor = executor
        self.gpu = gpu
        self.poll_interval = poll_interval
        self.full_refresh_interval = full_refresh_interval
        self.clients: set[EventStreamHandler] = set()
        self._changes = _StoreChanges(manager)
        self._known: dict[str, str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._reconciler: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ticks = 0  # store looks so far (tests check that clients do not multiply them)
        self._starting = asyncio.Lock()

    async def add(self, client: EventStreamHandler) -> None:
        """Register a client; the first one takes the baseline and starts the watcher.

        The baseline is read before this returns (and so before the client's hello), so a
        job submitted after the hello is always reported as a change.
        """
        async with self._starting:
            if self._task is None or self._task.done():
                loop = self._loop = asyncio.get_running_loop()
                # Token first: a change racing the listing is then seen on the next tick.
                token = await loop.run_in_executor(self.executor, self._changes.token)
                records = await loop.run_in_executor(self.executor, self.manager.list)
                self._known = None
                self._publish(records)
                self._task = loop.create_task(self._watch_jobs(token))
                self.ensure_reconciling()
                self._unsubscribe = await loop.run_in_executor(
                    self.executor, self.gpu.subscribe, self._on_gpu_sample
                )
        self.clients.add(client)

    def remove(self, client: EventStreamHandler) -> None:
        """Forget a disconnected client."""
        self.clients.discard(client)

    async def stop(self) -> None:
        """Stop the watcher, the reconciler and the sampler subscription; close every client."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._reconciler is not None:
            self._reconciler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reconciler
            self._reconciler = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for client in list(self.clients):
            client.close()
        self.clients.clear()
        self._changes.close()

    def broadcast(self, message: dict[str, Any]) -> None:
        """Send one message to every client (on the event loop)."""
        text = dumps_strict(message, default=str)
        for client in list(self.clients):
            try:
                client.write_message(text)
            except WebSocketClosedError:
                self.clients.discard(client)

    def ensure_reconciling(self) -> None:
        """Start (once, on the running loop) the task that settles jobs whose runner died."""
        if self._reconciler is None or self._reconciler.done():
            self._reconciler = asyncio.get_running_loop().create_task(self._reconcile_jobs())

    async def _reconcile_jobs(self) -> None:
        # A supervisor that dies (SIGKILL, OOM killer) writes nothing: look at the active
        # jobs' supervisors every tick, even with no client and no reader, so such a job
        # turns Failed (and its processes die) within a tick; the watcher then reports it.
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(self.executor, self.manager.reconcile)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep it alive; the next tick retries
                log.exception("workbench: reconciling jobs failed")
            await asyncio.sleep(self.poll_interval)

    async def _watch_jobs(self, last_token: int | None) -> None:
        loop = asyncio.get_running_loop()
        last_full = time.monotonic()
        while True:
            await asyncio.sleep(self.poll_interval)
            try:
                token = await loop.run_in_executor(self.executor, self._changes.token)
                now = time.monotonic()
                if (
                    token is None
                    or token != last_token
                    or now - last_full >= self.full_refresh_interval
                ):
                    last_token, last_full = token, now
                    records = await loop.run_in_executor(self.executor, self.manager.list)
                    self._publish(records)
                self.ticks += 1
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the one watcher alive; the next tick retries
                log.exception("workbench event stream: reading jobs failed")

    def _publish(self, records: list[JobRecord]) -> None:
        current = {r.name: (_signature(r), r) for r in records}
        first = self._known is None
        known = self._known or {}
        if not first:
            for name, (sig, record) in current.items():
                if known.get(name) != sig:
                    self.broadcast({"type": "job", "job": record.to_dict()})
            for name in known.keys() - current.keys():
                self.broadcast({"type": "job_deleted", "name": name})
        self._known = {name: sig for name, (sig, _) in current.items()}

    def _on_gpu_sample(self) -> None:
        """Called on the sampler's thread: hop to the loop before touching clients."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._send_gpu)

    def _send_gpu(self) -> None:
        if self.clients:
            self.broadcast(
                {
                    "type": "gpu",
                    "state": self.gpu.state,
                    "reason": self.gpu.reason,
                    "gpus": self.gpu.latest(),
                    "alerts": self.gpu.alerts(),
                }
            )


class EventStreamHandler(ExtensionHandlerMixin, WebSocketMixin, WebSocketHandler, JupyterHandler):
    """``{base_url}workbench/api/events``: the WebSocket every panel listens on."""

    auth_resource = "workbench"

    @property
    def hub(self) -> EventHub:
        """The server's one hub."""
        hub: EventHub = self.settings["workbench"].hub
        return hub

    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> None:
        """Authorize (read on ``workbench``), then upgrade to a WebSocket."""
        user = self.current_user
        allowed = self.authorizer.is_authorized(self, user, "read", self.auth_resource)
        if asyncio.iscoroutine(allowed):
            allowed = await allowed
        if not allowed:
            raise web.HTTPError(403)
        await super().get(*args, **kwargs)

    async def open(self, *args: Any, **kwargs: Any) -> None:
        """Register with the hub and greet with the current counts and GPU state."""
        super().open(*args, **kwargs)
        loop = asyncio.get_running_loop()
        context = self.settings["workbench"]
        counts = await loop.run_in_executor(context.executor, context.manager.counts)
        state = await loop.run_in_executor(
            context.executor, lambda: (context.gpu.state, context.gpu.reason)
        )
        await self.hub.add(self)
        self.write_message(
            json.dumps(
                {"type": "hello", "jobs": counts, "gpu": {"state": state[0], "reason": state[1]}}
            )
        )

    def on_message(self, message: str | bytes) -> None:
        """Clients only listen; anything they send is ignored."""

    def on_close(self) -> None:
        """Leave the hub."""
        self.hub.remove(self)
