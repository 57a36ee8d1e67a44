"""Fixtures for the server extension: a real Jupyter server (pytest-jupyter) on a private
WORKBENCH_HOME with the real local backend."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import jsonschema
import pytest
import yaml
from tornado.httpclient import HTTPClientError

from tests.conftest import ROOT

# pytest_plugins for jp_fetch & co. is declared in the root tests/conftest.py (pytest
# only accepts it there).

Fetch = Callable[..., Awaitable[Any]]

OPENAPI: dict[str, Any] = yaml.safe_load((ROOT / "docs" / "openapi.yaml").read_text())


def response_schema(parts: tuple[str, ...], method: str, code: int) -> dict[str, Any]:
    """The JSON schema docs/openapi.yaml gives the response ``code`` of ``method`` on the
    route whose path segments are ``parts``; fails the test when the response is undocumented."""
    for template, item in OPENAPI["paths"].items():
        segments = template.strip("/").split("/")
        if len(segments) == len(parts) and all(
            s == p or (s.startswith("{") and s.endswith("}"))
            for s, p in zip(segments, parts, strict=True)
        ):
            operation = item.get(method.lower())
            assert operation is not None, f"{method} {template} is not in docs/openapi.yaml"
            response = operation["responses"].get(str(code))
            assert response is not None, (
                f"{method} {template} -> {code} is not in docs/openapi.yaml"
            )
            response = _follow(response)
            content = response.get("content", {})
            assert "application/json" in content, (
                f"{method} {template} -> {code}: no JSON body documented"
            )
            return dict(content["application/json"]["schema"])
    raise AssertionError(f"/{'/'.join(parts)} is not in docs/openapi.yaml")


def _follow(node: dict[str, Any]) -> dict[str, Any]:
    """Follow a local ``$ref`` (``#/components/...``) in the OpenAPI document."""
    while "$ref" in node:
        target: Any = OPENAPI
        for key in node["$ref"].removeprefix("#/").split("/"):
            target = target[key]
        node = target
    return node


def request_schema(parts: tuple[str, ...], method: str) -> dict[str, Any] | None:
    """The JSON schema of the request body of ``method`` on the route, or None without one."""
    for template, item in OPENAPI["paths"].items():
        segments = template.strip("/").split("/")
        if len(segments) == len(parts) and all(
            s == p or (s.startswith("{") and s.endswith("}"))
            for s, p in zip(segments, parts, strict=True)
        ):
            body = (item.get(method.lower()) or {}).get("requestBody")
            if body is None:
                return None
            return dict(_follow(body)["content"]["application/json"]["schema"])
    return None


def validate_request(parts: tuple[str, ...], method: str, body: Any) -> None:
    """Check a JSON request body the server accepted against its schema in
    docs/openapi.yaml: the schema may not refuse what the server takes."""
    if parts[:2] != ("workbench", "api") or not body:
        return
    schema = request_schema(parts, method)
    assert schema is not None, f"{method} /{'/'.join(parts)} takes a body openapi.yaml omits"
    schema["components"] = OPENAPI["components"]
    jsonschema.Draft202012Validator(schema).validate(json.loads(body))


def validate_response(parts: tuple[str, ...], method: str, response: Any) -> None:
    """Check a workbench/api JSON response against its schema in docs/openapi.yaml."""
    if parts[:2] != ("workbench", "api"):
        return
    if not response.headers.get("Content-Type", "").startswith("application/json"):
        return
    schema = response_schema(parts, method, response.code)
    # The schema's $refs point into the document: give them its components to resolve.
    schema["components"] = OPENAPI["components"]
    jsonschema.Draft202012Validator(schema).validate(json.loads(response.body.decode()))


@pytest.fixture
def jp_fetch(jp_fetch: Fetch) -> Fetch:
    """pytest-jupyter's jp_fetch, validating every workbench/api JSON response (errors
    included) against the operation's response schema in docs/openapi.yaml, and every
    request body the server accepted against the operation's request schema."""

    async def fetch(*parts: str, **kwargs: Any) -> Any:
        method = kwargs.get("method", "GET")
        try:
            response = await jp_fetch(*parts, **kwargs)
        except HTTPClientError as e:
            if e.response is not None:
                validate_response(parts, method, e.response)
            raise
        validate_response(parts, method, response)
        if 200 <= response.code < 300:
            validate_request(parts, method, kwargs.get("body"))
        return response

    return fetch


@pytest.fixture
def jp_server_config(manager: Any) -> dict[str, Any]:
    """Load only our extension, with a fast event-stream tick; ``manager`` shares the home
    and cancels whatever a test leaves running."""
    return {
        "ServerApp": {
            "jpserver_extensions": {"workbench": True, "jupyter_server_terminals": False}
        },
        "WorkbenchApp": {"job_poll_interval": 0.1, "api_threads": 8},
    }


def body(response: Any) -> Any:
    """The JSON body of a response."""
    return json.loads(response.body.decode())


async def submit(jp_fetch: Fetch, spec: dict[str, Any]) -> dict[str, Any]:
    """POST a spec; returns the created record."""
    r = await jp_fetch("workbench", "api", "jobs", method="POST", body=json.dumps(spec))
    assert r.code == 201, r.body
    return dict(body(r))


async def wait_done(jp_fetch: Fetch, name: str, timeout: float = 60) -> dict[str, Any]:
    """Poll GET jobs/{name} until the job is terminal."""
    deadline = time.monotonic() + timeout
    while True:
        record = body(await jp_fetch("workbench", "api", "jobs", name))
        if record["status"] in ("Succeeded", "Failed", "Cancelled"):
            return dict(record)
        assert time.monotonic() < deadline, f"{name} still {record['status']}"
        await asyncio.sleep(0.1)


def py(code: str) -> list[str]:
    """A command running Python code with the tests' interpreter."""
    import sys

    return [sys.executable, "-u", "-c", code]
