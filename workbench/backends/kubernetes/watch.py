"""One watch per namespace and resource, with a label selector, that keeps a callback told
of every object's status change, once and in order, across timeouts, dropped
connections, stalls and 410 Gone.

The loop is the informer pattern, written small: list (selector) -> remember each
object's status and the list's resourceVersion -> watch from there with bookmarks ->
on a clean close re-watch from the last resourceVersion seen; on a dropped or stalled
connection (urllib3 ProtocolError / ReadTimeoutError) back off and re-watch; on 410
(as an HTTP status or an ERROR event inside the stream) re-list and deliver only what
differs from what was delivered. The official client is synchronous, so the loop runs in
one daemon thread (a watch per namespace is simpler than mixing it into an event loop).
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from . import rest

log = logging.getLogger(__name__)

GONE = 410


@dataclass(frozen=True)
class WatchEvent:
    """One status change of one object."""

    type: str  # ADDED | MODIFIED | DELETED
    name: str
    namespace: str | None
    uid: str
    resource_version: int
    object: dict[str, Any] = field(repr=False)


@dataclass
class WatchStats:
    """What the loop did (tests and benchmarks read it)."""

    lists: int = 0
    watches: int = 0
    expired: int = 0  # 410s, by HTTP status or ERROR event
    errors: int = 0  # dropped, stalled or refused connections
    bookmarks: int = 0
    delivered: int = 0


def default_status(obj: dict[str, Any]) -> Any:
    """What counts as a status change: ``status`` and whether deletion has begun."""
    return obj.get("status"), obj.get("metadata", {}).get("deletionTimestamp") is not None


class NamespaceWatch:
    """Watches one list call (``list_call(**kwargs)``, the namespace bound in) and calls
    ``on_change(WatchEvent)`` from its own thread."""

    def __init__(
        self,
        list_call: Callable[..., Any],
        on_change: Callable[[WatchEvent], None],
        label_selector: str | None = None,
        *,
        status_of: Callable[[dict[str, Any]], Any] = default_status,
        timeout_seconds: int = 300,
        read_timeout: float | None = None,
        connect_timeout: float = 10.0,
        max_backoff: float = 5.0,
        name: str = "kubernetes-watch",
    ) -> None:
        self._list_call = list_call
        self._on_change = on_change
        self._selector = label_selector
        self._status_of = status_of
        # The server ends each watch after timeout_seconds; a connection silent for longer
        # than read_timeout (no event, no bookmark) is taken as stalled and replaced.
        self._timeout_seconds = timeout_seconds
        self._read_timeout = read_timeout if read_timeout is not None else timeout_seconds + 30
        self._connect_timeout = connect_timeout
        self._max_backoff = max_backoff
        self._name = name
        self._known: dict[str, tuple[str, Any]] = {}  # name -> (uid, status delivered)
        self._rv: str | None = None
        self._stop = threading.Event()
        self._synced = threading.Event()
        self._thread: threading.Thread | None = None
        self._resp: Any = None
        self.stats = WatchStats()

    # -- lifecycle --
    def start(self) -> NamespaceWatch:
        """Run the loop in a daemon thread."""
        self._thread = threading.Thread(target=self.run, name=self._name, daemon=True)
        self._thread.start()
        return self

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list has been delivered."""
        return self._synced.wait(timeout)

    def stop(self, timeout: float | None = 5.0) -> None:
        """End the loop; an open connection is shut so a blocked read returns at once."""
        self._stop.set()
        resp = self._resp
        if resp is not None:
            sock = getattr(getattr(resp, "connection", None), "sock", None)
            with contextlib.suppress(OSError):
                if sock is not None:
                    sock.shutdown(2)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (from a list, an event or a bookmark)."""
        return self._rv

    # -- the loop --
    def run(self) -> None:
        """List, then watch, until stop(); every failure is retried."""
        failures = 0
        while not self._stop.is_set():
            try:
                if self._rv is None:
                    self._relist()
                self._watch_once()
                failures = 0
            except ApiException as e:
                if e.status == GONE:
                    self.stats.expired += 1
                    self._rv = None  # re-list, then resume from the list's version
                    continue
                failures += 1
                self.stats.errors += 1
                log.warning("%s: API error %s (%s); retrying", self._name, e.status, e.reason)
            except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
                if self._stop.is_set():
                    break
                failures += 1
                self.stats.errors += 1
                log.info("%s: watch connection lost (%s); resuming", self._name, type(e).__name__)
            if failures:
                self._stop.wait(min(self._max_backoff, 0.05 * 2 ** min(failures, 10)))

    def _call(self, **kwargs: Any) -> Any:
        return self._list_call(
            label_selector=self._selector or None,
            _preload_content=False,
            _request_timeout=(self._connect_timeout, self._read_timeout),
            **kwargs,
        )

    def _relist(self) -> None:
        resp = self._call()
        self.stats.lists += 1
        body = json.loads(rest.read(resp))
        items = sorted(body.get("items") or [], key=_rv_of)
        listed = {o["metadata"]["name"] for o in items}
        for name in [n for n in self._known if n not in listed]:  # gone while we were away
            uid, _ = self._known.pop(name)
            self._deliver("DELETED", {"metadata": {"name": name, "uid": uid}})
        for obj in items:
            self._apply("ADDED", obj)
        self._rv = body.get("metadata", {}).get("resourceVersion") or "0"
        self._synced.set()

    def _watch_once(self) -> None:
        resp = self._call(
            watch=True,
            resource_version=self._rv,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeout_seconds,
        )
        self._resp = resp
        self.stats.watches += 1
        try:
            # stop() sets the flag, then shuts the socket of _resp: one set before this
            # assignment was never seen by it, and the read below would block until the
            # server's timeoutSeconds (a CLI's exit waited up to 2 s per watch).
            if self._stop.is_set():
                return
            for line in _lines(resp):
                if self._stop.is_set():
                    return
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    code = obj.get("code")
                    raise ApiException(
                        status=code, reason=f"{obj.get('reason')}: {obj.get('message')}"
                    )
                rv = obj.get("metadata", {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    self.stats.bookmarks += 1
                elif kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(kind, obj)
                if rv:
                    self._rv = rv
        finally:
            self._resp = None
            with contextlib.suppress(Exception):
                resp.release_conn()

    # -- delivery --
    def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name, uid = meta.get("name", ""), meta.get("uid", "")
        known = self._known.get(name)
        if kind == "DELETED":
            if known is not None:
                del self._known[name]
                self._deliver("DELETED", obj)
            return
        status = self._status_of(obj)
        if known is not None and known[0] != uid:  # deleted and re-created while away
            del self._known[name]
            self._deliver("DELETED", {"metadata": {"name": name, "uid": known[0]}})
            known = None
        if known is not None and known[1] == status:
            return  # no status change (a label edit, a replayed event): nothing to tell
        self._known[name] = (uid, status)
        self._deliver("ADDED" if known is None else "MODIFIED", obj)

    def _deliver(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        event = WatchEvent(
            type=kind,
            name=meta.get("name", ""),
            namespace=meta.get("namespace"),
            uid=meta.get("uid", ""),
            resource_version=_rv_of(obj),
            object=obj,
        )
        self.stats.delivered += 1
        try:
            self._on_change(event)
        except Exception:  # one bad callback must not end the namespace's watch
            log.exception("%s: change callback failed for %s", self._name, event.name)


def _rv_of(obj: dict[str, Any]) -> int:
    try:
        return int(obj.get("metadata", {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def _lines(resp: Any) -> Iterator[str]:
    """Complete lines of a chunked watch response (a partial last line is dropped: the
    connection ended inside an event, so it is re-read after reconnecting)."""
    pending = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip():
                yield line.decode()


# The list-and-watch query parameters of NamespaceWatch._call, as the API spells them.
_QUERY = {"label_selector": "labelSelector", "field_selector": "fieldSelector",
          "watch": "watch", "resource_version": "resourceVersion",
          "allow_watch_bookmarks": "allowWatchBookmarks", "timeout_seconds": "timeoutSeconds"}  # fmt: skip


def list_call(api: client.ApiClient, url_path: str) -> Callable[..., Any]:
    """A list (or, with watch=True, watch) of the collection at ``url_path`` (rest.request:
    the client's request path without the typed classes, an unread response as the typed
    ``list_namespaced_*(_preload_content=False)`` return, and their ApiException)."""

    def call(_preload_content: bool = False, _request_timeout: Any = None, **params: Any) -> Any:
        query = {_QUERY[k]: v for k, v in params.items()}
        return rest.request(api, "GET", url_path, query, timeout=_request_timeout)

    return call


def pods(api: client.ApiClient, namespace: str, on_change: Callable[[WatchEvent], None],
         label_selector: str | None = None, **kwargs: Any) -> NamespaceWatch:  # fmt: skip
    """A watch of the pods of ``namespace``."""
    call = list_call(api, f"/api/v1/namespaces/{namespace}/pods")
    return NamespaceWatch(call, on_change, label_selector, name=f"watch-pods-{namespace}", **kwargs)


def jobs(api: client.ApiClient, namespace: str, on_change: Callable[[WatchEvent], None],
         label_selector: str | None = None, **kwargs: Any) -> NamespaceWatch:  # fmt: skip
    """A watch of the batch/v1 Jobs of ``namespace``."""
    call = list_call(api, f"/apis/batch/v1/namespaces/{namespace}/jobs")
    return NamespaceWatch(call, on_change, label_selector, name=f"watch-jobs-{namespace}", **kwargs)


def events(api: client.ApiClient, namespace: str, on_change: Callable[[WatchEvent], None],
           status_of: Callable[[dict[str, Any]], Any], **kwargs: Any) -> NamespaceWatch:  # fmt: skip
    """A watch of the core/v1 Events of ``namespace`` (no selector: Events carry no labels)."""
    call = list_call(api, f"/api/v1/namespaces/{namespace}/events")
    return NamespaceWatch(call, on_change, None, status_of=status_of,
                          name=f"watch-events-{namespace}", **kwargs)  # fmt: skip


def custom(api: client.ApiClient, group: str, version: str, plural: str, namespace: str,
           on_change: Callable[[WatchEvent], None], label_selector: str | None = None,
           **kwargs: Any) -> NamespaceWatch:  # fmt: skip
    """A watch of custom resources (e.g. kubeflow.org/v1 pytorchjobs) of ``namespace``."""
    call = list_call(api, f"/apis/{group}/{version}/namespaces/{namespace}/{plural}")
    return NamespaceWatch(
        call, on_change, label_selector, name=f"watch-{plural}-{namespace}", **kwargs
    )
