"""Fixtures for the server extension: a real Jupyter server (pytest-jupyter) on a private
WORKBENCH_HOME with the real local backend."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

# pytest_plugins for jp_fetch & co. is declared in the root tests/conftest.py (pytest
# only accepts it there).

Fetch = Callable[..., Awaitable[Any]]


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
