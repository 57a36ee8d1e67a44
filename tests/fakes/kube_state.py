"""The state behind the fake Kubernetes API server: objects, one resourceVersion, history.

Kept apart from the HTTP layer (kube_apiserver.py) so tests and the in-process "kubelet"
can change the cluster directly (set a pod's phase, append to its log, compact history)
while the official client sees every change through the wire protocol.
"""

from __future__ import annotations

import bisect
import pickle
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

# (group, version, plural); group "" is the core API.
Resource = tuple[str, str, str]

KINDS: dict[str, str] = {
    "pods": "Pod",
    "services": "Service",
    "secrets": "Secret",
    "events": "Event",
    "configmaps": "ConfigMap",
    "jobs": "Job",
    "nodes": "Node",
    "namespaces": "Namespace",
    "pytorchjobs": "PyTorchJob",
    "tfjobs": "TFJob",
    "mpijobs": "MPIJob",
    "podgroups": "PodGroup",
}
CLUSTER_SCOPED = {"nodes", "namespaces"}
TERMINAL_PHASES = ("Succeeded", "Failed")


def clone(obj: Any) -> Any:
    """A deep copy of a JSON-like value: pickle's round trip, a third of copy.deepcopy's
    time on a Job manifest (the fake copies each object on every write and read)."""
    return pickle.loads(pickle.dumps(obj, pickle.HIGHEST_PROTOCOL))


def now_rfc3339() -> str:
    """The current time as Kubernetes writes timestamps."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def api_version(res: Resource) -> str:
    """apiVersion of a resource (``v1`` or ``group/version``)."""
    return f"{res[0]}/{res[1]}" if res[0] else res[1]


def kind_of(res: Resource) -> str:
    """The kind of a resource's objects (a guess from the plural for unknown CRDs)."""
    return KINDS.get(res[2]) or res[2][:-1].capitalize()


class ApiError(Exception):
    """An error the server answers with a Status body."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> dict[str, Any]:
        """The Status object, as Kubernetes returns it."""
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def gone(rv: int, compacted: int) -> ApiError:
    """410 Gone for a resourceVersion older than the compaction point."""
    return ApiError(410, "Expired", f"too old resource version: {rv} ({compacted})")


# ---- label selectors -------------------------------------------------------------------
_REQ = re.compile(
    r"\s*(?P<neg>!)?(?P<key>[A-Za-z0-9_./-]+)\s*"
    r"(?:(?P<op>==|!=|=|\s+notin\s+|\s+in\s+)\s*(?P<val>\([^)]*\)|[A-Za-z0-9_.-]*))?\s*"
)


def parse_selector(text: str | None) -> list[tuple[str, str, set[str]]]:
    """``a=b,c!=d,e in (x,y),f notin (z),g,!h`` -> [(key, op, values)]; ValueError if bad."""
    reqs: list[tuple[str, str, set[str]]] = []
    if not text:
        return reqs
    # split on commas outside parentheses
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    parts.append(cur)
    for part in parts:
        m = _REQ.fullmatch(part)
        if not m:
            raise ValueError(f"unable to parse requirement: {part!r}")
        key, op, val = m.group("key"), (m.group("op") or "").strip(), m.group("val")
        if m.group("neg"):
            if op:
                raise ValueError(f"unable to parse requirement: {part!r}")
            reqs.append((key, "!exists", set()))
        elif not op:
            reqs.append((key, "exists", set()))
        elif op in ("in", "notin"):
            if not val or not val.startswith("("):
                raise ValueError(f"{op} needs a parenthesised list: {part!r}")
            reqs.append((key, op, {v.strip() for v in val[1:-1].split(",") if v.strip()}))
        else:
            reqs.append((key, "!=" if op == "!=" else "=", {val or ""}))
    return reqs


def selector_matches(reqs: list[tuple[str, str, set[str]]], labels: dict[str, str]) -> bool:
    """True when ``labels`` satisfy every requirement."""
    for key, op, values in reqs:
        has, val = key in labels, labels.get(key)
        ok = {
            "=": has and val in values,
            "!=": not has or val not in values,
            "in": has and val in values,
            "notin": not has or val not in values,
            "exists": has,
            "!exists": not has,
        }[op]
        if not ok:
            return False
    return True


def field_matches(text: str | None, obj: dict[str, Any]) -> bool:
    """A small fieldSelector: ``metadata.name``, ``metadata.namespace``, ``status.phase``,
    ``involvedObject.name`` with = / == / !=."""
    for part in (text or "").split(","):
        if not part.strip():
            continue
        m = re.fullmatch(r"\s*([A-Za-z.]+)\s*(==|!=|=)\s*(.*?)\s*", part)
        if not m:
            raise ValueError(f"invalid field selector: {part!r}")
        cur: Any = obj
        for key in m.group(1).split("."):
            cur = cur.get(key) if isinstance(cur, dict) else None
        equal = (cur or "") == m.group(3)
        if equal != (m.group(2) != "!="):
            return False
    return True


# ---- state -----------------------------------------------------------------------------
@dataclass
class Change:
    """One entry of the history watches replay."""

    rv: int
    res: Resource
    namespace: str | None
    type: str  # ADDED | MODIFIED | DELETED
    obj: dict[str, Any]
    old: dict[str, Any] | None


def _opened() -> threading.Event:
    event = threading.Event()
    event.set()
    return event


@dataclass
class Faults:
    """Test hooks for watch connections (applied to watches opened after they are set,
    and to open ones on their next event)."""

    drop_after: int | None = None  # drop each new watch abruptly after N events
    drop_count: int = 1 << 30  # how many watches the drop applies to
    stall: threading.Event = field(default_factory=threading.Event)  # set: watches stall
    expired_as_http: bool = False  # 410 as an HTTP status instead of an ERROR event
    bookmark_interval: float = 1.0
    watch_epoch: int = 0  # bumped by compact(expire_watches=True): open watches get 410
    log_drops: int = 0  # the next N chunks of followed pod logs each cut their connection
    # cleared: every POST waits until it is set again (an API server that stalls writes)
    posts_open: threading.Event = field(default_factory=_opened)


class ClusterState:
    """Every object of the fake cluster, one monotonically increasing resourceVersion and
    the change history from the compaction point on."""

    def __init__(self) -> None:
        self._mutex = threading.RLock()
        self.lock = threading.Condition(self._mutex)
        # A watch waits on its resource's condition (same mutex): a change wakes only the
        # watches of its resource, not every stream open on the server (wake_all does).
        self._wakes: dict[Resource, threading.Condition] = {}
        # A real cluster's resourceVersion is never 0 (that value means "any" to a watch).
        self.rv = 1
        self.objects: dict[tuple[Resource, str | None, str], dict[str, Any]] = {}
        self.history: list[Change] = []
        self.compacted = 0
        self.faults = Faults()
        self.logs: dict[tuple[str, str, str], bytearray] = {}  # (ns, pod, container)
        self.log_closed: set[tuple[str, str]] = set()
        self.requests: list[tuple[str, str]] = []  # (method, path), for benchmarks
        self.api_groups: dict[str, list[str]] = {"batch": ["v1"], "kubeflow.org": ["v1"]}

    # -- writes (hold self.lock) --
    def _record(self, res: Resource, ns: str | None, type_: str, obj: dict[str, Any],
                old: dict[str, Any] | None) -> None:  # fmt: skip
        self.history.append(Change(self.rv, res, ns, type_, clone(obj), old))
        self.lock.notify_all()
        if res in self._wakes:
            self._wakes[res].notify_all()

    def watch_wake(self, res: Resource) -> threading.Condition:
        """What a watch of ``res`` waits on (hold the lock): notified on a change of
        ``res`` and by wake_all."""
        return self._wakes.setdefault(res, threading.Condition(self._mutex))

    def wake_all(self) -> None:
        """Wake every waiter, watches included (hold the lock): faults, compaction, stop."""
        self.lock.notify_all()
        for wake in self._wakes.values():
            wake.notify_all()

    def _bump(self, obj: dict[str, Any]) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def create(self, res: Resource, ns: str | None, body: dict[str, Any]) -> dict[str, Any]:
        """Store a new object; 409 if the name is taken."""
        with self.lock:
            obj = clone(body)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name")
            if not name:
                raise ApiError(422, "Invalid", f"{kind_of(res)}: metadata.name: Required value")
            key = (res, ns, name)
            if key in self.objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{res[2]}{"." + res[0] if res[0] else ""} "{name}" already exists',
                    {"name": name, "group": res[0], "kind": res[2]},
                )
            obj["apiVersion"], obj["kind"] = api_version(res), obj.get("kind") or kind_of(res)
            if ns is not None:
                meta["namespace"] = ns
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta["generation"] = 1
            if res[2] == "pods":
                obj.setdefault("status", {}).setdefault("phase", "Pending")
            if res[2] == "secrets":  # stringData is write-only: folded into data
                import base64

                for k, v in (obj.pop("stringData", None) or {}).items():
                    obj.setdefault("data", {})[k] = base64.b64encode(v.encode()).decode()
            self._bump(obj)
            self.objects[key] = obj
            self._record(res, ns, "ADDED", obj, None)
            return clone(obj)

    def get(self, res: Resource, ns: str | None, name: str) -> dict[str, Any]:
        """One object; 404 if absent."""
        with self.lock:
            obj = self.objects.get((res, ns, name))
            if obj is None:
                raise not_found(res, name)
            return clone(obj)

    def replace(self, res: Resource, ns: str | None, name: str, body: dict[str, Any],
                subresource: str | None = None) -> dict[str, Any]:  # fmt: skip
        """PUT: 409 Conflict on a stale resourceVersion; /status changes status only."""
        with self.lock:
            old = self.objects.get((res, ns, name))
            if old is None:
                raise not_found(res, name)
            given = (body.get("metadata") or {}).get("resourceVersion")
            if given and given != old["metadata"]["resourceVersion"]:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {res[2]} "{name}": the object has been '
                    "modified; please apply your changes to the latest version and try again",
                    {"name": name, "kind": res[2]},
                )
            if subresource == "status":
                new = clone(old)
                new["status"] = clone(body.get("status"))
            else:
                new = clone(body)
                new["metadata"] = {**old["metadata"], **(body.get("metadata") or {})}
                new["status"] = clone(old.get("status"))
                if new.get("spec") != old.get("spec"):
                    new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
            return self._update(res, ns, name, old, new)

    def patch(self, res: Resource, ns: str | None, name: str, patch: Any,
              subresource: str | None = None) -> dict[str, Any]:  # fmt: skip
        """Merge patch. JSON merge and strategic merge are treated alike (a list is
        replaced whole, which is what patching ``finalizers`` or ``labels`` needs); as on
        a real server, the main resource ignores ``status`` and /status changes only it."""
        with self.lock:
            old = self.objects.get((res, ns, name))
            if old is None:
                raise not_found(res, name)
            if isinstance(patch, list):
                raise ApiError(415, "UnsupportedMediaType", "json-patch is not supported here")
            new = merge_patch(clone(old), patch)
            if subresource == "status":
                new = {**clone(old), "status": new.get("status")}
            elif "status" in old:
                new["status"] = clone(old["status"])
            for key in ("uid", "creationTimestamp", "namespace", "name"):
                if key in old["metadata"]:
                    new["metadata"][key] = old["metadata"][key]
            if new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            return self._update(res, ns, name, old, new)

    def _update(self, res: Resource, ns: str | None, name: str, old: dict[str, Any],
                new: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
        self._bump(new)
        self.objects[(res, ns, name)] = new
        self._record(res, ns, "MODIFIED", new, clone(old))
        self._maybe_finish_deletion(res, ns, name)
        return clone(new)

    def delete(self, res: Resource, ns: str | None, name: str, policy: str | None = None,
               grace: int | None = None) -> tuple[dict[str, Any], bool]:  # fmt: skip
        """Delete; returns (object, gone now). Foreground: the owner gets a
        deletionTimestamp and the foregroundDeletion finalizer and goes when its
        dependents have gone. A pod whose kubelet holds it (``finalizers`` contains
        ``workbench.test/kubelet``) stays terminating until the kubelet releases it."""
        with self.lock:
            obj = self.objects.get((res, ns, name))
            if obj is None:
                raise not_found(res, name)
            policy = policy or "Background"
            uid = obj["metadata"]["uid"]
            dependents = [k for k, o in self.objects.items()
                          if any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])]  # fmt: skip
            lingers = bool(obj["metadata"].get("finalizers")) or (
                policy == "Foreground" and bool(dependents)
            )
            if obj["metadata"].get("deletionTimestamp") is None and lingers:
                new = clone(obj)
                new["metadata"]["deletionTimestamp"] = now_rfc3339()
                if grace is not None:
                    new["metadata"]["deletionGracePeriodSeconds"] = grace
                if policy == "Foreground" and dependents:
                    new["metadata"].setdefault("finalizers", []).append("foregroundDeletion")
                self._bump(new)
                self.objects[(res, ns, name)] = new
                self._record(res, ns, "MODIFIED", new, clone(obj))
                obj = new
            for key in dependents:
                if policy == "Orphan":
                    dep = clone(self.objects[key])
                    dep["metadata"]["ownerReferences"] = [
                        r for r in dep["metadata"]["ownerReferences"] if r.get("uid") != uid
                    ]
                    self._update(key[0], key[1], key[2], self.objects[key], dep)
                elif key in self.objects:
                    self.delete(key[0], key[1], key[2], policy, grace)
            if not lingers and (res, ns, name) in self.objects:
                self._finish(res, ns, name, self.objects[(res, ns, name)])
            self._maybe_finish_deletion(res, ns, name)
            gone_now = (res, ns, name) not in self.objects
            return clone(obj), gone_now

    def _maybe_finish_deletion(self, res: Resource, ns: str | None, name: str) -> None:
        obj = self.objects.get((res, ns, name))
        if obj is None or obj["metadata"].get("deletionTimestamp") is None:
            return
        finalizers = [f for f in obj["metadata"].get("finalizers") or []]
        if "foregroundDeletion" in finalizers:
            uid = obj["metadata"]["uid"]
            if any(any(r.get("uid") == uid for r in o["metadata"].get("ownerReferences") or [])
                   for o in self.objects.values()):  # fmt: skip
                return
            finalizers.remove("foregroundDeletion")
        if finalizers:
            return
        self._finish(res, ns, name, obj)

    def _finish(self, res: Resource, ns: str | None, name: str, obj: dict[str, Any]) -> None:
        del self.objects[(res, ns, name)]
        self.rv += 1
        final = clone(obj)
        final["metadata"]["resourceVersion"] = str(self.rv)
        self._record(res, ns, "DELETED", final, obj)
        # an owner waiting in foreground deletion may be free now
        for ref in obj["metadata"].get("ownerReferences") or []:
            for (r2, ns2, n2), o in list(self.objects.items()):
                if o["metadata"]["uid"] == ref.get("uid"):
                    self._maybe_finish_deletion(r2, ns2, n2)

    def list(self, res: Resource, ns: str | None, label_selector: str | None = None,
             field_selector: str | None = None) -> tuple[list[dict[str, Any]], int]:  # fmt: skip
        """Matching objects and the current resourceVersion."""
        reqs = parse_selector(label_selector)
        with self.lock:
            items = [clone(o) for (r, n, _), o in sorted(self.objects.items(), key=_order)
                     if r == res and (ns is None or n == ns)
                     and selector_matches(reqs, o["metadata"].get("labels") or {})
                     and field_matches(field_selector, o)]  # fmt: skip
            return items, self.rv

    # -- hooks for tests and the kubelet --
    def compact(self, expire_watches: bool = False) -> int:
        """Forget history up to now: a watch or list from an older resourceVersion gets
        410. With ``expire_watches``, open watches end with an ERROR 410 event too."""
        with self.lock:
            self.compacted = self.rv
            self.history.clear()
            if expire_watches:
                self.faults.watch_epoch += 1
            self.wake_all()
            return self.compacted

    def append_log(self, ns: str, pod: str, text: str | bytes, container: str = "") -> None:
        """What the kubelet saw a container write."""
        data = text.encode() if isinstance(text, str) else text
        with self.lock:
            self.logs.setdefault((ns, pod, container), bytearray()).extend(data)
            self.lock.notify_all()

    def close_log(self, ns: str, pod: str) -> None:
        """End followers of a pod's log (the container exited)."""
        with self.lock:
            self.log_closed.add((ns, pod))
            self.lock.notify_all()

    def changes_after(self, rv: int) -> list[Change]:
        """History entries newer than ``rv`` (hold the lock); 410 if compacted past it."""
        if rv < self.compacted:
            raise gone(rv, self.compacted)
        # history is in rv order: a search by key, not a list of every rv per wake-up (that
        # made each watch's wake O(history), and a long benchmark quadratic in the server)
        i = bisect.bisect_right(self.history, rv, key=lambda c: c.rv)
        return self.history[i:]


def _order(item: tuple[tuple[Resource, str | None, str], dict[str, Any]]) -> tuple[str, str]:
    (_, ns, name), _ = item
    return (ns or "", name)


def not_found(res: Resource, name: str) -> ApiError:
    """404 with Kubernetes' message."""
    group = f".{res[0]}" if res[0] else ""
    return ApiError(404, "NotFound", f'{res[2]}{group} "{name}" not found',
                    {"name": name, "group": res[0], "kind": res[2]})  # fmt: skip


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return clone(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target
