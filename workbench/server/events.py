"""One event stream for every open panel: job changes, GPU samples and alerts.

WebSocket protocol v1 (docs/server.md; message shapes in workbench.wireschema). A single
watcher follows the store's change feed: one tiny ``PRAGMA data_version`` query per tick
when nothing changed, else the jobs changed since the last id it saw (never the whole
list). The single host sampler pushes GPU samples. Both fan out to every client; no client
causes its own polling of backends or NVML.

``{base_url}workbench/api/events?protocol=1[&since=K]`` -> text frames:
``{"type": "hello", "protocol": 1, "last_id", "resumed", "jobs": {status: n}, "gpu"}`` first;
then (with ``since`` still kept) every job changed after K, then live changes:
``{"type": "job", "id", "job": <JobRecord>}``, ``{"type": "job_deleted", "id", "name"}``,
``{"type": "reset", "last_id"}`` (``since`` too old or unknown: re-list with GET jobs),
``{"type": "gpu", "state", "reason", "gpus", "alerts"}`` (no id, not replayed).
Ids strictly increase within a connection and each change is sent at most once to it.

Live metrics (``_livemetrics``): a client sends ``{"type": "subscribe", "metrics": NAME,
"since": CURSOR}`` / ``{"type": "unsubscribe", "metrics": NAME}``; the hub then pushes
``{"type": "metrics", "name", "cursor", "scalars", "gpu"}`` when that job reports more, on
the same tick, and answers a bad client frame with ``{"type": "error", "field", ...}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from .._store_feed import ChangeBatch, DataVersion
from ..errors import SpecError
from ..manager import JobManager
from ..wirejson import dumps_strict
from ._gpu import GpuMonitor
from ._livemetrics import (
    MAX_SUBSCRIPTIONS,
    Subscription,
    error_frame,
    parse_client_frame,
    read_subscriptions,
)

log = logging.getLogger(__name__)

PROTOCOL = 1
# Close code for a request this server cannot serve (an unsupported protocol, a bad since):
# 4000-4999 are the application's own (RFC 6455 7.4.2); 4400 reads as "bad request".
CLOSE_BAD_REQUEST = 4400


def change_messages(batch: ChangeBatch) -> list[tuple[int, dict[str, Any]]]:
    """The protocol messages of one batch, oldest change first, each with its id."""
    out: list[tuple[int, dict[str, Any]]] = []
    for record in batch.jobs:
        change_id = batch.ids[record.name]
        out.append((change_id, {"type": "job", "id": change_id, "job": record.to_dict()}))
    for name in batch.deleted:
        change_id = batch.ids[name]
        out.append((change_id, {"type": "job_deleted", "id": change_id, "name": name}))
    out.sort(key=lambda item: item[0])
    return out


class EventHub:
    """Owns the one change-feed watcher and the sampler subscription; fans messages out."""

    def __init__(
        self,
        manager: JobManager,
        executor: Any,
        gpu: GpuMonitor,
        poll_interval: float = 1.0,
        feed_interval: float = 0.25,
    ) -> None:
        self.manager = manager
        self.executor = executor
        self.gpu = gpu
        self.poll_interval = poll_interval  # runner checks of active jobs
        # Change-feed looks: an idle one is one PRAGMA data_version, so it can be frequent
        # and a change reaches clients well within a second.
        self.feed_interval = min(feed_interval, poll_interval)
        self.clients: set[EventStreamHandler] = set()
        self.cursor = 0  # the newest change id the watcher has read and broadcast
        self._version = DataVersion(manager.store)
        self._task: asyncio.Task[None] | None = None
        self._reconciler: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ticks = 0  # store looks so far (tests check that clients do not multiply them)
        self._starting = asyncio.Lock()

    async def _start(self) -> None:
        """Start the watcher (from the feed's newest id) and the sampler subscription once."""
        async with self._starting:
            if self._task is None or self._task.done():
                loop = self._loop = asyncio.get_running_loop()
                self.cursor = await loop.run_in_executor(self.executor, self.manager.last_change_id)
                self._task = loop.create_task(self._watch_jobs())
                self.ensure_reconciling()
                self._unsubscribe = await loop.run_in_executor(
                    self.executor, self.gpu.subscribe, self._on_gpu_sample
                )

    async def add(self, client: EventStreamHandler, since: int | None) -> None:
        """Greet ``client`` (hello), send what it missed after ``since``, then register it
        for live changes: every change after its resume point exactly once, in id order."""
        await self._start()
        loop = asyncio.get_running_loop()
        context = client.settings["workbench"]

        def greeting() -> tuple[dict[str, Any], ChangeBatch | None]:
            batch = None if since is None else self.manager.changes(since)
            head = self.manager.last_change_id()  # after the batch: no replayed id exceeds it
            hello = {
                "type": "hello",
                "protocol": PROTOCOL,
                "last_id": head,
                "resumed": batch is not None and not batch.reset,
                "jobs": self.manager.counts(),
                "gpu": {"state": context.gpu.state, "reason": context.gpu.reason},
            }
            return hello, batch

        hello, batch = await loop.run_in_executor(self.executor, greeting)
        client.send(hello)
        if batch is None:
            client.sent_id = int(hello["last_id"])  # live changes only: it lists the rest
        else:
            client.sent_id = since or 0
            self._deliver(client, batch)
        # Catch up until no await separates the client's position from the watcher's: the
        # check and the registration then happen in one step on the loop, so the watcher's
        # next broadcast starts exactly where the client stands.
        while client.sent_id < self.cursor or (batch is not None and batch.more):
            batch = await loop.run_in_executor(self.executor, self.manager.changes, client.sent_id)
            self._deliver(client, batch)
        if client.ws_connection is not None and not client.ws_connection.is_closing():
            self.clients.add(client)  # else it left while catching up: nothing to register

    def _deliver(self, client: EventStreamHandler, batch: ChangeBatch) -> None:
        """Send one batch to one client, skipping what it already has."""
        if batch.reset:
            client.send({"type": "reset", "last_id": batch.last_id})
            client.sent_id = batch.last_id
            return
        for change_id, message in change_messages(batch):
            if change_id > client.sent_id:
                client.send(message)
                client.sent_id = change_id
        client.sent_id = max(client.sent_id, batch.last_id)

    def remove(self, client: EventStreamHandler) -> None:
        """Forget a disconnected client."""
        self.clients.discard(client)

    async def stop(self) -> None:
        """Stop the watcher, the reconciler and the sampler subscription; close every client."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for task in (self._reconciler, self._task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._reconciler = self._task = None
        for client in list(self.clients):
            client.close()
        self.clients.clear()
        self._version.close()

    def broadcast(self, message: dict[str, Any]) -> None:
        """Send one message (without a change id: GPU samples) to every client."""
        for client in list(self.clients):
            client.send(message)

    def ensure_reconciling(self) -> None:
        """Start (once, on the running loop) the task that settles jobs whose runner died."""
        if self._reconciler is None or self._reconciler.done():
            self._reconciler = asyncio.get_running_loop().create_task(self._reconcile_jobs())

    async def _reconcile_jobs(self) -> None:
        # The one periodic look that is not the feed, and why it stays: a supervisor that
        # dies (SIGKILL, OOM killer) writes nothing, so no change is recorded. Every tick it
        # reads the ACTIVE jobs only (an indexed query, not the list) and checks their
        # runners, even with no client, so such a job turns Failed within a tick; that
        # write then reaches clients through the feed. Elapsed time and cost are not
        # refreshed here: clients compute them from started_at and price_per_hour.
        loop = asyncio.get_running_loop()
        while True:
            try:
                await loop.run_in_executor(self.executor, self.manager.reconcile)
            except asyncio.CancelledError:
                raise
            except Exception:  # keep it alive; the next tick retries
                log.exception("workbench: reconciling jobs failed")
            await asyncio.sleep(self.poll_interval)

    def _read_feed(self, since: int) -> list[ChangeBatch]:
        """On a worker thread: nothing when no process committed since the last tick, else
        every batch after ``since``."""
        if not self._version.changed():
            return []
        batches = []
        while True:
            batch = self.manager.changes(since)
            batches.append(batch)
            since = batch.last_id
            if not batch.more or batch.reset:
                return batches

    async def _watch_jobs(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.feed_interval)
            try:
                batches = await loop.run_in_executor(self.executor, self._read_feed, self.cursor)
                for batch in batches:
                    self._publish(batch)
                await self._push_metrics()
                self.ticks += 1
            except asyncio.CancelledError:
                raise
            except Exception:  # keep the one watcher alive; the next tick retries
                log.exception("workbench event stream: reading the change feed failed")

    def _publish(self, batch: ChangeBatch) -> None:
        """Fan one batch out (on the loop); each client gets only ids beyond its own."""
        for client in list(self.clients):
            self._deliver(client, batch)
        self.cursor = max(self.cursor, batch.last_id) if not batch.reset else batch.last_id

    async def _push_metrics(self) -> None:
        """One incremental read per live metrics subscription; a frame where there is news."""
        subs = [
            (client, sub)
            for client in list(self.clients)
            for sub in client.subscriptions.values()
            if not sub.done
        ]
        if not subs:
            return  # nobody watches metrics: no reads at all
        loop = asyncio.get_running_loop()
        keyed = [(i, sub) for i, (_client, sub) in enumerate(subs)]
        results = await loop.run_in_executor(self.executor, read_subscriptions, self.manager, keyed)
        for key, read_from, got, finished in results:
            client, sub = subs[key]
            if client.subscriptions.get(sub.name) is not sub or sub.cursor != read_from:
                continue  # unsubscribed or re-subscribed while reading: drop this read
            if got is None:  # the job was deleted: its job_deleted change says so
                client.subscriptions.pop(sub.name, None)
                continue
            new = bool(got["scalars"] or got["gpu"])
            sub.cursor = str(got["cursor"])
            if new:
                client.send(
                    {
                        "type": "metrics",
                        "name": sub.name,
                        "cursor": sub.cursor,
                        "scalars": got["scalars"],
                        "gpu": got["gpu"],
                    }
                )
            elif finished:
                sub.done = True  # everything it reported was sent: no more reads

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
    sent_id = 0  # the newest change id this connection has been sent (or skipped past)
    subscriptions: dict[str, Subscription]  # live metrics this connection watches, by job

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

    def _request(self) -> tuple[int | None, str | None]:
        """``since`` from the query, or why the request cannot be served."""
        protocol = self.get_query_argument("protocol", str(PROTOCOL))
        if protocol.strip() != str(PROTOCOL):
            return None, (
                f"unsupported protocol {protocol[:20]!r}: this server speaks protocol "
                f"{PROTOCOL} (connect with ?protocol={PROTOCOL})"
            )
        since = self.get_query_argument("since", None)
        if since is None:
            return None, None
        if not since.strip().isdigit():
            return None, f"since must be a change id (a whole number >= 0), got {since[:20]!r}"
        return int(since), None

    async def open(self, *args: Any, **kwargs: Any) -> None:
        """Check the protocol, then let the hub greet, catch up and register this client."""
        super().open(*args, **kwargs)
        self.subscriptions = {}
        since, error = self._request()
        if error is not None:
            self.close(CLOSE_BAD_REQUEST, error)
            return
        await self.hub.add(self, since)

    def send(self, message: dict[str, Any]) -> None:
        """Write one message; a client that went away is dropped."""
        try:
            self.write_message(dumps_strict(message, default=str))
        except WebSocketClosedError:
            self.hub.remove(self)

    async def on_message(self, message: str | bytes) -> None:
        """Subscribe to or unsubscribe from one job's live metrics; a bad frame gets an
        ``error`` frame naming the field (the connection stays open)."""
        try:
            kind, name, since = parse_client_frame(message)
            if kind == "unsubscribe":
                self.subscriptions.pop(name, None)
                return
            if name not in self.subscriptions and len(self.subscriptions) >= MAX_SUBSCRIPTIONS:
                raise SpecError(
                    "metrics",
                    f"at most {MAX_SUBSCRIPTIONS} live metrics subscriptions per connection",
                    "unsubscribe from a job you no longer show",
                )
            loop = asyncio.get_running_loop()
            record = await loop.run_in_executor(self.hub.executor, self.hub.manager.store.get, name)
            if record is None:
                raise SpecError("metrics", f"no job named {name[:80]!r}", "name an existing job")
        except SpecError as e:
            self.send(error_frame(e))
            return
        # The next tick sends what the job reported after ``since``.
        self.subscriptions[name] = Subscription(name=name, cursor=since)

    def on_close(self) -> None:
        """Leave the hub."""
        self.hub.remove(self)
