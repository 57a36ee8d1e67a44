"""Requests through the official client's own request path, without its typed API classes.

``ApiClient.param_serialize`` + ``call_api`` is what every typed method runs: the
configured host, auth (tokens, exec plugins, their refresh), default headers, the
connection pool, TLS and Retry-After handling. The typed classes add pydantic models:
importing CoreV1Api and BatchV1Api for the first call took 2.4 s of each CLI verb that
reads the cluster (docs/benchmarks.md), and each call converts the arguments and the
answer. Here the answer stays JSON, as the backend uses it everywhere.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from kubernetes import client
from kubernetes.client.rest import ApiException


def path(*parts: str) -> str:
    """A resource path from segments (names quoted, as the typed methods quote them)."""
    return "/" + "/".join(quote(p, safe="") for p in parts if p)


def request(api: client.ApiClient, method: str, url_path: str, query: dict[str, Any] | None = None,
            body: Any = None, timeout: Any = None) -> Any:  # fmt: skip
    """The unread urllib3 response of one request (stream it, or read ``.data``); a
    non-2xx status raises the ApiException the typed methods raise."""
    params = [(k, v) for k, v in (query or {}).items() if v is not None]
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    serialized = api.param_serialize(method, url_path, query_params=params or None,
                                     header_params=headers, body=body,
                                     auth_settings=["BearerToken"])  # fmt: skip
    resp = api.call_api(*serialized, _request_timeout=timeout)
    if not 200 <= resp.status <= 299:
        resp.read()
        raise ApiException.from_response(http_resp=resp, body=None, data=None)
    return resp.response


def get_json(api: client.ApiClient, url_path: str, query: dict[str, Any] | None = None,
             timeout: Any = None) -> dict[str, Any]:  # fmt: skip
    """GET ``url_path``: the object (or list) as a dict."""
    found: dict[str, Any] = json.loads(read(request(api, "GET", url_path, query, timeout=timeout)))
    return found


def read(resp: Any) -> bytes:
    """The whole body of ``resp``, its connection back in the pool (read in full first, so
    the next request on it starts clean)."""
    try:
        data: bytes = resp.data
    finally:
        resp.release_conn()
    return data


class CoreReads:
    """The two core/v1 reads that pod logs make (logs.py, logcopy.py), with the typed
    CoreV1Api's signatures, so either serves there; through request(), always unread
    (``_preload_content`` is accepted for the signature and must be False)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.api = api

    def read_namespaced_pod_log(self, name: str, namespace: str, *, follow: bool = False,
                                container: str | None = None, tail_lines: int | None = None,
                                _preload_content: bool = False,
                                _request_timeout: Any = None) -> Any:  # fmt: skip
        """The pod's log (``follow``: streamed until the container ends)."""
        assert not _preload_content, "read the response (rest.read) or stream it"
        query = {"follow": "true" if follow else None, "container": container,
                 "tailLines": tail_lines}  # fmt: skip
        url_path = path("api", "v1", "namespaces", namespace, "pods", name, "log")
        return request(self.api, "GET", url_path, query, timeout=_request_timeout)

    def read_namespaced_pod(self, name: str, namespace: str, *, _preload_content: bool = False,
                            _request_timeout: Any = None) -> Any:  # fmt: skip
        """The pod, unread."""
        assert not _preload_content, "read the response (rest.read)"
        url_path = path("api", "v1", "namespaces", namespace, "pods", name)
        return request(self.api, "GET", url_path, timeout=_request_timeout)
