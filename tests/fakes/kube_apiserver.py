"""A stateful fake Kubernetes API server on 127.0.0.1 that the official client talks to
unchanged.

Real REST paths for namespaced and cluster-scoped resources of the core group
(``/api/v1/...``) and of any group (``/apis/GROUP/VERSION/...``, so batch/v1 Jobs and
kubeflow.org/v1 PyTorchJobs alike), 201/404/409/410/422 with Status bodies, one
resourceVersion counter, label and field selectors, watches that resume from a
resourceVersion with BOOKMARKs and a clean close on ``timeoutSeconds``, a compaction
point (410 as an HTTP status or as an ERROR event), pod logs with ``follow``, foreground
deletion, and fault hooks (drop a watch after N events, stall watches, compact now).

No kube-apiserver can run on the machines this project is tested on (see
docs/kubernetes.md); this is the stand-in. It speaks HTTP/1.1 with chunked streams, one
JSON object per line, as the real server does.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .kube_state import (
    CLUSTER_SCOPED,
    TERMINAL_PHASES,
    ApiError,
    Change,
    ClusterState,
    Resource,
    api_version,
    field_matches,
    gone,
    kind_of,
    parse_selector,
    selector_matches,
)


def parse_path(path: str) -> tuple[Resource, str | None, str | None, str | None]:
    """``/api/v1/namespaces/ns/pods/name/log`` -> (resource, namespace, name, subresource)."""
    parts = [p for p in path.split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        group, version, rest = "", parts[1], parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({path})"
        )
    ns = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    plural, name, sub = (
        rest[0],
        rest[1] if len(rest) > 1 else None,
        rest[2] if len(rest) > 2 else None,
    )
    if len(rest) > 3:
        raise ApiError(
            404, "NotFound", f"the server could not find the requested resource ({path})"
        )
    return (group, version, plural), ns, name, sub


class FakeKubeAPIServer:
    """The server: ``start()``, ``url``, ``state`` (the cluster) and ``stop()``."""

    def __init__(self) -> None:
        self.state = ClusterState()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._watches_started = 0
        self._kick = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeKubeAPIServer:
        """Listen on 127.0.0.1 (a free port) in a daemon thread."""
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; open streams end."""
        self._closing.set()
        with self.state.lock:
            self.state.wake_all()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    # -- fault hooks --
    def drop_next_watches(self, count: int, after_events: int) -> None:
        """The next ``count`` watches to open are cut after ``after_events`` events."""
        with self.state.lock:
            self.state.faults.drop_after = after_events
            self.state.faults.drop_count = self._watches_started + count

    def kick_watches(self) -> None:
        """Make open watches reconnect now (a short stall past their read timeout is the
        portable way; here: end them cleanly, as a server restart would)."""
        with self.state.lock:
            self._kick += 1
            self.state.wake_all()

    # -- conveniences for tests and the kubelet --
    def set_pod_phase(self, ns: str, name: str, phase: str, **status: Any) -> dict[str, Any]:
        """Move a pod through Pending/Running/Succeeded/Failed (what the kubelet reports)."""
        patch = {"status": {"phase": phase, **status}}
        obj = self.state.patch(("", "v1", "pods"), ns, name, patch, subresource="status")
        if phase in TERMINAL_PHASES:
            self.state.close_log(ns, name)
        return obj

    def release_pod(self, ns: str, name: str) -> None:
        """The kubelet finished killing a terminating pod: drop its kubelet finalizer."""
        obj = self.state.get(("", "v1", "pods"), ns, name)
        fins = [f for f in obj["metadata"].get("finalizers") or [] if f != KUBELET_FINALIZER]
        self.state.patch(("", "v1", "pods"), ns, name, {"metadata": {"finalizers": fins}})

    def record_event(self, ns: str, involved: dict[str, Any], reason: str, message: str,
                     type_: str = "Warning") -> dict[str, Any]:  # fmt: skip
        """A core/v1 Event about ``involved`` (what the scheduler writes)."""
        meta = involved["metadata"]
        body = {
            "metadata": {"generateName": f"{meta['name']}."},
            "involvedObject": {
                "kind": involved.get("kind"),
                "name": meta["name"],
                "namespace": ns,
                "uid": meta.get("uid"),
                "apiVersion": involved.get("apiVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "count": 1,
            "firstTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "source": {"component": "default-scheduler"},
        }
        return self.state.create(("", "v1", "events"), ns, body)


KUBELET_FINALIZER = "workbench.test/kubelet"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes: without TCP_NODELAY each small reply
    # waits ~40 ms for the client's delayed ACK (measured: 45 ms -> <2 ms per request).
    disable_nagle_algorithm = True
    server_fake: FakeKubeAPIServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # -- plumbing --
    def _send_json(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"invalid JSON body: {e}") from None

    def _start_stream(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _dispatch(self, method: str) -> None:
        state = self.server_fake.state
        split = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(split.query).items()}
        with state.lock:
            state.requests.append((method, split.path + (f"?{split.query}" if split.query else "")))
        try:
            if split.path.rstrip("/") in ("/api", "/apis", "/version"):
                self._send_json(200, self._discovery(split.path.rstrip("/")))
                return
            res, ns, name, sub = parse_path(split.path)
            if ns is None and name is None and res[2] not in CLUSTER_SCOPED and method != "GET":
                raise ApiError(405, "MethodNotAllowed", "the server does not allow this method")
            if method == "GET" and name is None:
                if q.get("watch") in ("true", "1"):
                    self._watch(res, ns, q)
                else:
                    self._list(res, ns, q)
            elif method == "GET" and sub == "log":
                self._log(ns or "", name or "", q)
            elif method == "GET":
                self._send_json(200, state.get(res, ns, name or ""))
            elif method == "POST" and name is None:
                body = self._body()
                state.faults.posts_open.wait(60)
                self._send_json(201, state.create(res, ns, body))
            elif method == "PUT" and name:
                self._send_json(200, state.replace(res, ns, name, self._body(), sub))
            elif method == "PATCH" and name:
                self._send_json(200, state.patch(res, ns, name, self._body(), sub))
            elif method == "DELETE" and name:
                body = self._body() or {}
                policy = q.get("propagationPolicy") or body.get("propagationPolicy")
                grace = q.get("gracePeriodSeconds") or body.get("gracePeriodSeconds")
                obj, gone_now = state.delete(res, ns, name, policy,
                                             int(grace) if grace is not None else None)  # fmt: skip
                self._send_json(200 if gone_now else 202, obj)
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} {split.path} is not allowed")
        except ApiError as e:
            self._send_json(e.code, e.status())
        except ValueError as e:  # a malformed selector or number
            self._send_json(400, ApiError(400, "BadRequest", str(e)).status())
        except (BrokenPipeError, ConnectionResetError):
            pass

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    # -- reads --
    def _discovery(self, path: str) -> dict[str, Any]:
        if path == "/version":
            return {"major": "1", "minor": "37", "gitVersion": "v1.37.0-fake"}
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        groups = self.server_fake.state.api_groups
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
                    "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]},
                }
                for g, vs in groups.items()
            ],
        }

    def _list(self, res: Resource, ns: str | None, q: dict[str, str]) -> None:
        state = self.server_fake.state
        rv = q.get("resourceVersion")
        if (
            rv
            and rv != "0"
            and q.get("resourceVersionMatch") == "Exact"
            and int(rv) < state.compacted
        ):
            raise gone(int(rv), state.compacted)
        items, current = state.list(res, ns, q.get("labelSelector"), q.get("fieldSelector"))
        self._send_json(200, {
            "kind": f"{kind_of(res)}List",
            "apiVersion": api_version(res),
            "metadata": {"resourceVersion": str(current)},
            "items": items,
        })  # fmt: skip

    def _watch(self, res: Resource, ns: str | None, q: dict[str, str]) -> None:
        fake, state = self.server_fake, self.server_fake.state
        faults = state.faults
        reqs = parse_selector(q.get("labelSelector"))
        fsel = q.get("fieldSelector")
        bookmarks = q.get("allowWatchBookmarks") in ("true", "1")
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        deadline = time.monotonic() + timeout if timeout else None
        rv_text = q.get("resourceVersion")

        def matches(obj: dict[str, Any] | None) -> bool:
            return (
                obj is not None
                and selector_matches(reqs, obj["metadata"].get("labels") or {})
                and field_matches(fsel, obj)
            )

        with state.lock:
            fake._watches_started += 1
            drop_after = faults.drop_after if fake._watches_started <= faults.drop_count else None
            epoch, kick = faults.watch_epoch, fake._kick
            initial: list[dict[str, Any]] = []
            if not rv_text or rv_text == "0":
                items, cursor = state.list(res, ns, q.get("labelSelector"), fsel)
                initial = [{"type": "ADDED", "object": o} for o in items]
            else:
                cursor = int(rv_text)
                if cursor < state.compacted and faults.expired_as_http:
                    raise gone(cursor, state.compacted)
        self._start_stream("application/json")
        sent = 0
        last_bookmark = time.monotonic()

        def emit(event: dict[str, Any]) -> bool:
            """Send one event; False when the fault hook drops the connection."""
            nonlocal sent
            if drop_after is not None and sent >= drop_after:
                return False
            self._chunk(json.dumps(event).encode() + b"\n")
            sent += 1
            return True

        def expired(rv: int) -> dict[str, Any]:
            return {"type": "ERROR", "object": gone(rv, state.compacted).status()}

        try:
            for event in initial:
                if not emit(event):
                    return self._drop()
            while True:
                if fake._closing.is_set():
                    break
                while faults.stall.is_set() and not fake._closing.is_set():
                    time.sleep(0.02)
                    if deadline and time.monotonic() >= deadline:
                        break
                with state.lock:
                    try:
                        changes: list[Change] | None = state.changes_after(cursor)
                    except ApiError:
                        changes = None
                    if changes == [] and faults.watch_epoch == epoch and fake._kick == kick:
                        wait = faults.bookmark_interval if bookmarks else 0.5
                        if deadline:
                            wait = min(wait, max(0.0, deadline - time.monotonic()))
                        state.watch_wake(res).wait(wait)
                        changes = state.changes_after(cursor) if cursor >= state.compacted else None
                    now_rv, epoch_now, kicked = state.rv, faults.watch_epoch, fake._kick != kick
                if changes is None or epoch_now != epoch:
                    emit(expired(cursor))
                    break
                if kicked:
                    break
                if faults.stall.is_set():
                    continue
                for c in changes:
                    cursor = c.rv
                    if c.res != res or (ns is not None and c.namespace != ns):
                        continue
                    was, now_ = matches(c.old), matches(c.obj)
                    if c.type == "DELETED":
                        event = {"type": "DELETED", "object": c.obj} if was else None
                    elif now_ and not was:
                        event = {"type": "ADDED", "object": c.obj}
                    elif now_:
                        event = {"type": c.type, "object": c.obj}
                    elif was:  # left the selector: a watcher sees it go
                        event = {"type": "DELETED", "object": c.obj}
                    else:
                        event = None
                    if event and not emit(event):
                        return self._drop()
                if deadline and time.monotonic() >= deadline:
                    break
                if bookmarks and time.monotonic() - last_bookmark >= faults.bookmark_interval:
                    last_bookmark = time.monotonic()
                    cursor = max(cursor, now_rv)
                    mark = {"kind": kind_of(res), "apiVersion": api_version(res),
                            "metadata": {"resourceVersion": str(cursor)}}  # fmt: skip
                    if not emit({"type": "BOOKMARK", "object": mark}):
                        return self._drop()
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True

    def _drop(self) -> None:
        """Cut the connection mid-stream, without the final chunk (a dropped TCP link)."""
        with contextlib.suppress(OSError):
            self.wfile.flush()
            self.connection.shutdown(2)
        self.close_connection = True

    def _log_drop(self) -> bool:
        """Test hook: cut a followed log after the chunk just sent (``faults.log_drops``)."""
        faults = self.server_fake.state.faults
        with self.server_fake.state.lock:
            if faults.log_drops <= 0:
                return False
            faults.log_drops -= 1
        self._drop()
        return True

    def _log(self, ns: str, pod: str, q: dict[str, str]) -> None:
        state = self.server_fake.state
        obj = state.get(("", "v1", "pods"), ns, pod)  # 404 when absent
        containers = [c["name"] for c in obj.get("spec", {}).get("containers", [])]
        container = q.get("container") or (containers[0] if len(containers) == 1 else "")
        if not container and len(containers) > 1:
            raise ApiError(400, "BadRequest", f"a container name must be specified for pod {pod}, "
                           f"choose one of: {containers}")  # fmt: skip
        key = (ns, pod, container)
        follow = q.get("follow") in ("true", "1")

        def buffer() -> bytes:
            return bytes(state.logs.get(key) or state.logs.get((ns, pod, "")) or b"")

        with state.lock:
            data = buffer()
        offset = len(data)  # followers continue after what existed when they came
        if q.get("tailLines"):
            n = int(q["tailLines"])
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-n:]) if n else b""
        if not follow:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self._start_stream("text/plain")
        try:
            if data:
                self._chunk(data)
                if self._log_drop():
                    return
            while not self.server_fake._closing.is_set():
                with state.lock:
                    more = buffer()[offset:]
                    closed = (ns, pod) in state.log_closed or (
                        ("", "v1", "pods"),
                        ns,
                        pod,
                    ) not in state.objects
                    if not more and not closed:
                        state.lock.wait(0.5)
                        continue
                if more:
                    self._chunk(more)
                    offset += len(more)
                    if self._log_drop():
                        return
                elif closed:
                    break
            self._end_stream()
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


@contextlib.contextmanager
def running_fake() -> Iterator[FakeKubeAPIServer]:
    """A started fake, stopped afterwards."""
    fake = FakeKubeAPIServer().start()
    try:
        yield fake
    finally:
        fake.stop()
