"""The client edge: one ApiClient from the backend's settings, the calls the backend makes,
and the one place ApiExceptions become workbench errors."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import urllib3
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.rest import ApiException
from kubernetes.config.config_exception import ConfigException

from ...errors import BackendUnavailableError, SpecError, SubmitError
from . import rest
from .config import KubeSettings
from .kubeflow import PLURALS
from .manifests import LABEL_JOB, LABEL_MANAGED
from .volcano import GROUP as VOLCANO_GROUP
from .volcano import KIND_KEY as VOLCANO_KIND
from .volcano import PLURAL as VOLCANO_PLURAL
from .volcano import PODGROUPS
from .volcano import VERSION as VOLCANO_VERSION

BACKEND = "kubernetes"
KUBEFLOW = ("kubeflow.org", "v1", "pytorchjobs")  # (group, version, plural) of PyTorchJobs
VOLCANO = (VOLCANO_GROUP, VOLCANO_VERSION, VOLCANO_PLURAL)
# details["kind"] -> (group, version, plural) of custom-resource workloads
CUSTOM_WORKLOADS = {
    **{kind: (*KUBEFLOW[:2], plural) for kind, plural in PLURALS.items()},
    VOLCANO_KIND: VOLCANO,
}
UNREACHABLE = (urllib3.exceptions.HTTPError, OSError)
# Seconds a create or patch may take (connect, then the answer): without one a stalled API
# server holds a submit forever (the typed calls default to none either).
WRITE_TIMEOUT = urllib3.Timeout(connect=10.0, read=30.0)
SNAPSHOT_SECONDS = 5.0  # how long admit reuses the nodes and pods it listed
NO_CLUSTER_HINT = "set KUBECONFIG (or kubernetes.kubeconfig in the workbench config)"
# How often the kubeconfig loader's per-request hook may run: it re-applies every setting
# (a twentieth of a submit's client time, measured with py-spy) to refresh a token that
# expires, and it refreshes 5 minutes before the expiry, so once a second loses nothing.
REFRESH_SECONDS = 1.0
ENSURE_SECONDS = 60.0  # how long a namespace's shared Service, once checked, is taken to exist
MERGE_PATCH = "application/strategic-merge-patch+json"  # what the typed patch_* send a dict as


def throttled(configuration: client.Configuration) -> None:
    """Run ``configuration``'s refresh hook at most once per REFRESH_SECONDS (the first
    call runs it). The kubeconfig loader's hook re-installs itself on every run, so the
    throttle keeps the newest one and puts itself back each time."""
    hook = [configuration.refresh_api_key_hook]
    last = [float("-inf")]

    def run(c: client.Configuration) -> None:
        now = time.monotonic()
        if hook[0] is not None and now - last[0] >= REFRESH_SECONDS:
            last[0] = now
            hook[0](c)
            if c.refresh_api_key_hook is not run:
                hook[0] = c.refresh_api_key_hook
                c.refresh_api_key_hook = run

    if hook[0] is not None:
        configuration.refresh_api_key_hook = run


def raw(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a client method for its undecoded response (JSON dicts, streams): the typed
    models would cost a conversion per object and lose fields they do not know."""
    return method(*args, _preload_content=False, **kwargs)


def owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference to ``owner`` (as stored) that does not block its deletion."""
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
            "uid": meta["uid"], "blockOwnerDeletion": False, "controller": False}  # fmt: skip


def api_error(e: ApiException, doing: str) -> SubmitError:
    """A SubmitError that says what failed and the server's own message (never a body
    that could echo a Secret back: only the Status message)."""
    message = e.reason or ""
    try:
        message = json.loads(e.body or "{}").get("message") or message
    except (ValueError, AttributeError):
        pass
    return SubmitError(BACKEND, f"{doing}: {e.status} {message}".strip())


class Cluster:
    """An API client and the typed APIs the backend uses, made on first use."""

    def __init__(self, settings: KubeSettings, context: str | None = None) -> None:
        self.settings = settings
        self.context = context or settings.context
        self._api: client.ApiClient | None = None
        self._lock = threading.Lock()
        self._served: dict[tuple[str, str], bool] = {}
        self._ensured: dict[tuple[str, str], float] = {}  # (namespace, Service) -> when checked
        self._snapshot: tuple[float, list[dict[str, Any]], list[dict[str, Any]]] | None = None

    @property
    def configured(self) -> bool:
        """True when there is a kubeconfig or in-cluster config to use (nothing contacted);
        once loaded, the config in use (a file check per call was 2-3% of a submit)."""
        if self._api is not None:
            return True
        return self.settings.kubeconfig_file() is not None or self.settings.use_in_cluster()

    @property
    def api(self) -> client.ApiClient:
        """The ApiClient; BackendUnavailableError when no cluster is configured."""
        with self._lock:
            if self._api is None:
                self._api = self._connect()
            return self._api

    def _connect(self) -> client.ApiClient:
        path = self.settings.kubeconfig_file()
        try:
            if path is not None:
                api = kube_config.new_client_from_config(str(path), context=self.context)
                throttled(api.configuration)
                return api
            if self.settings.use_in_cluster():
                configuration = client.Configuration()
                kube_config.load_incluster_config(client_configuration=configuration)
                return client.ApiClient(configuration)
        except (ConfigException, OSError, ValueError) as e:
            raise BackendUnavailableError(BACKEND, f"cannot load the cluster config: {e}",
                                          NO_CLUSTER_HINT) from None  # fmt: skip
        raise BackendUnavailableError(
            BACKEND, "no kubeconfig and not in a cluster", NO_CLUSTER_HINT
        )

    def close(self) -> None:
        """Close the client's connection pool."""
        with self._lock:
            if self._api is not None:
                self._api.close()
                self._api = None

    @property
    def core(self) -> rest.CoreReads:
        """The core/v1 reads of pod logs (rest.CoreReads: the typed CoreV1Api's signatures,
        without importing it, which alone took ~1.4 s of `workbench logs`)."""
        return rest.CoreReads(self.api)

    def serves(self, group: str, version: str) -> bool:
        """Whether the cluster serves ``group/version`` (discovery, asked once)."""
        key = (group, version)
        if key not in self._served:
            groups = rest.get_json(self.api, "/apis", timeout=10).get("groups") or []
            self._served[key] = any(
                g.get("name") == group
                and any(v.get("version") == version for v in g.get("versions") or [])
                for g in groups
            )
        return self._served[key]

    # ---- objects --------------------------------------------------------------------------
    def create(self, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Create one manifest; returns the object as stored (a dict)."""
        kind = workload_kind(obj)
        try:
            if kind == "Secret":
                return self._post(f"/api/v1/namespaces/{namespace}/secrets", obj)
            if kind == "Service":
                return self._post(f"/api/v1/namespaces/{namespace}/services", obj)
            if kind == "Job":
                return self._post(f"/apis/batch/v1/namespaces/{namespace}/jobs", obj)
            if kind in CUSTOM_WORKLOADS:
                group, version, plural = CUSTOM_WORKLOADS[kind]
                return self._post(f"/apis/{group}/{version}/namespaces/{namespace}/{plural}", obj)
        except ApiException as e:
            if e.status == 409:
                name = obj["metadata"]["name"]
                raise SpecError("name", f"a {kind} named {name!r} already exists in namespace "
                                f"{namespace}", "pick another --name") from None  # fmt: skip
            raise api_error(e, f"creating {kind} {obj['metadata']['name']}") from None
        raise SubmitError(BACKEND, f"cannot create a {kind}")

    def ensure_service(self, namespace: str, body: dict[str, Any]) -> None:
        """Make sure the shared Service ``body`` (manifests.ranks_service) is there as
        workbench made it: created when missing (a 409 from a racing creator is as good).
        Checked once a minute per namespace (ENSURE_SECONDS), so a sweep of submits pays
        one request, not one per job. SubmitError when a Service of that name is someone
        else's, or has been changed so it would not name the jobs' pods."""
        name = body["metadata"]["name"]
        key = (namespace, name)
        checked = self._ensured.get(key)
        if checked is not None and time.monotonic() - checked < ENSURE_SECONDS:
            return
        url_path = rest.path("api", "v1", "namespaces", namespace, "services", name)
        try:
            try:
                found = rest.get_json(self.api, url_path, timeout=(10.0, 30.0))
            except ApiException as e:
                if e.status != 404:
                    raise
                try:
                    found = self._post(f"/api/v1/namespaces/{namespace}/services", body)
                except ApiException as e2:
                    if e2.status != 409:
                        raise
                    found = rest.get_json(self.api, url_path, timeout=(10.0, 30.0))
        except ApiException as e:
            raise api_error(e, f"making sure Service {name} exists") from None
        labels = (found.get("metadata") or {}).get("labels") or {}
        spec, want = found.get("spec") or {}, body["spec"]
        if labels.get(LABEL_MANAGED) != "workbench" or any(
            spec.get(k) != v for k, v in want.items()
        ):
            whose = "workbench did not make" if labels.get(LABEL_MANAGED) != "workbench" else (
                "has been changed")  # fmt: skip
            raise SubmitError(BACKEND, (
                f"namespace {namespace} has a Service {name!r} that {whose}; indexed jobs' "
                f"pods take their DNS names from it (spec {json.dumps(want, sort_keys=True)}). "
                f"Delete it (kubectl delete service {name} -n {namespace}) and submit again: "
                "workbench makes it anew"))  # fmt: skip
        self._ensured[key] = time.monotonic()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST a manifest as it is. The typed create_* calls validate the dict into the
        client's pydantic models and serialise it back (two thirds of a submit's client
        time, measured with py-spy); the wire form is the same."""
        return self._send("POST", path, body, "application/json")

    def _send(self, method: str, path: str, body: dict[str, Any],
              content_type: str) -> dict[str, Any]:  # fmt: skip
        """One request with a JSON body, on the client's own connection pool with its auth
        and default headers (what call_api sends, less its per-request deep walk of the
        body and response wrapping); the object the server returns, or the ApiException
        the typed calls raise."""
        api = self.api
        headers = {**api.default_headers, "Content-Type": content_type,
                   "Accept": "application/json"}  # fmt: skip
        if api.cookie:
            headers["Cookie"] = api.cookie
        api.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        resp = api.rest_client.pool_manager.request(
            method,
            api.configuration.host + path,
            body=json.dumps(body),
            headers=headers,
            timeout=WRITE_TIMEOUT,
        )
        data: bytes = resp.data or b""
        if not 200 <= resp.status < 300:
            raise ApiException(status=resp.status, reason=resp.reason,
                               body=data.decode(errors="replace"))  # fmt: skip
        created: dict[str, Any] = json.loads(data)
        return created

    def workload(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """The job's Job, PyTorchJob or Volcano Job, or None when there is none."""
        try:
            return rest.get_json(self.api, _workload_path(namespace, kind, name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"reading {kind} {name}") from None

    def metadata(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """The metadata of a Secret or Service (never a Secret's data), or None when there
        is none."""
        try:
            plural = "secrets" if kind == "Secret" else "services"
            obj = rest.get_json(
                self.api, rest.path("api", "v1", "namespaces", namespace, plural, name)
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"reading {kind} {name}") from None
        meta: dict[str, Any] = obj.get("metadata") or {}
        return meta

    def delete_workload(self, namespace: str, kind: str, name: str) -> bool:
        """Delete in the foreground (pods first); False when it was already gone."""
        try:
            rest.read(rest.request(self.api, "DELETE", _workload_path(namespace, kind, name),
                                   body={"propagationPolicy": "Foreground"}))  # fmt: skip
        except ApiException as e:
            if e.status == 404:
                return False
            raise api_error(e, f"deleting {kind} {name}") from None
        return True

    def delete_quietly(self, namespace: str, kind: str, name: str) -> None:
        """Delete a Secret, Service or workload, ignoring one that is gone (cleanup)."""
        try:
            plural = {"Secret": "secrets", "Service": "services", "Pod": "pods"}.get(kind)
            if plural is None:
                self.delete_workload(namespace, kind, name)
            else:
                url_path = rest.path("api", "v1", "namespaces", namespace, plural, name)
                rest.read(rest.request(self.api, "DELETE", url_path))
        except (ApiException, SubmitError, *UNREACHABLE):
            pass

    def own(self, namespace: str, kind: str, name: str, owner: dict[str, Any]) -> None:
        """Make ``owner`` (the workload) the owner of a Secret or Service, so the cluster
        removes it with the job."""
        patch = {"metadata": {"ownerReferences": [owner_ref(owner)]}}
        plural = "secrets" if kind == "Secret" else "services"
        try:
            # Raw, as _post: the typed patch_* validate their arguments with pydantic per
            # call (a sixth of a submit's client time); the wire form is the same.
            self._send("PATCH", f"/api/v1/namespaces/{namespace}/{plural}/{name}", patch,
                       MERGE_PATCH)  # fmt: skip
        except ApiException as e:
            raise api_error(e, f"setting the owner of {kind} {name}") from None

    def disown(self, namespace: str, kind: str, name: str) -> None:
        """Drop a Secret's or Service's owner (a gang retry deletes the workload, not them)."""
        patch = {"metadata": {"ownerReferences": None}}
        plural = "secrets" if kind == "Secret" else "services"
        self._send("PATCH", f"/api/v1/namespaces/{namespace}/{plural}/{name}", patch, MERGE_PATCH)

    def pods(self, namespace: str, job: str | None = None,
             timeout: Any = None) -> list[dict[str, Any]]:  # fmt: skip
        """Pods of one job (or of every workbench job) in ``namespace``."""
        selector = f"{LABEL_JOB}={job}" if job else LABEL_JOB
        url_path = rest.path("api", "v1", "namespaces", namespace, "pods")
        items: list[dict[str, Any]] = (
            rest.get_json(self.api, url_path, {"labelSelector": selector}, timeout).get("items")
            or []
        )
        return items

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        """One pod (ApiException 404 when there is none)."""
        return rest.get_json(
            self.api, rest.path("api", "v1", "namespaces", namespace, "pods", name)
        )

    def podgroup(self, namespace: str, job: str) -> dict[str, Any] | None:
        """The Volcano PodGroup of ``job`` (it carries the Job's labels), or None."""
        try:
            group, version, plural = PODGROUPS
            url_path = rest.path("apis", group, version, "namespaces", namespace, plural)
            query = {"labelSelector": f"{LABEL_JOB}={job}"}
            found = rest.get_json(self.api, url_path, query).get("items") or []
        except ApiException as e:
            if e.status == 404:
                return None
            raise api_error(e, f"reading the PodGroup of {job}") from None
        return found[-1] if found else None

    def nodes(self) -> list[dict[str, Any]]:
        """Every node."""
        items: list[dict[str, Any]] = (
            rest.get_json(self.api, "/api/v1/nodes", timeout=10).get("items") or []
        )
        return items

    def capacity_snapshot(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(nodes, bound unfinished pods) for the capacity check, listed at most once per
        SNAPSHOT_SECONDS: a burst of submits costs two lists, not two per job (the check
        asks whether a gang can ever fit, which a few seconds' age does not change)."""
        with self._lock:
            snap = self._snapshot
        if snap is not None and time.monotonic() - snap[0] < SNAPSHOT_SECONDS:
            return snap[1], snap[2]
        nodes, pods = self.nodes(), self.all_pods()
        with self._lock:
            self._snapshot = (time.monotonic(), nodes, pods)
        return nodes, pods

    def all_pods(self) -> list[dict[str, Any]]:
        """Every pod of the cluster that is bound to a node and not finished (GPU holders)."""
        items = rest.get_json(self.api, "/api/v1/pods", timeout=10).get("items") or []
        return [p for p in items if (p.get("spec") or {}).get("nodeName")
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]  # fmt: skip


def _workload_path(namespace: str, kind: str, name: str) -> str:
    """Where the job's Job, PyTorchJob/TFJob/MPIJob or Volcano Job lives."""
    if kind in CUSTOM_WORKLOADS:
        group, version, plural = CUSTOM_WORKLOADS[kind]
        return rest.path("apis", group, version, "namespaces", namespace, plural, name)
    return rest.path("apis", "batch", "v1", "namespaces", namespace, "jobs", name)


def workload_kind(obj: dict[str, Any]) -> str:
    """What ``details["kind"]`` records for a manifest: its kind, or ``Job.batch.volcano.sh``
    for a Volcano Job (batch/v1's is ``Job``)."""
    if str(obj.get("apiVersion", "")).startswith(VOLCANO_GROUP + "/"):
        return VOLCANO_KIND
    return str(obj["kind"])
