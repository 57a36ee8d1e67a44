"""GET /workbench/api/backends over real HTTP: every backend the registry knows, with what
it can run here."""

from __future__ import annotations

import pytest

from tests.server.conftest import body
from workbench.backends import register_backend, unregister_backend


@pytest.fixture
def no_engine(tmp_path, monkeypatch):
    """No container engine answers: DOCKER_HOST names a socket that does not exist."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")


@pytest.fixture
def ghost():
    """A backend the registry knows whose package is not installed."""
    register_backend("ghost", "workbench_ghost_backend:GhostBackend", hint="pip install ghost")
    yield
    unregister_backend("ghost")


async def test_backends_lists_local_with_its_capabilities(jp_fetch, no_engine, ghost):
    r = await jp_fetch("workbench", "api", "backends")
    assert r.code == 200
    by_name = {b["name"]: b for b in body(r)["backends"]}
    local = by_name["local"]
    assert local["default"] is True and local["error"] is None
    assert local["capabilities"] == {
        "runtimes": ["process"],  # no engine answers: processes only
        "gpu_modes": ["whole", "fractional"],
        "data_schemes": ["file", "nas", "oss", "s3", "s3a"],  # not pvc: that needs a cluster
        "flavours": [],
    }
    # Known to the registry, not loadable here: listed, saying why and what to install.
    assert by_name["ghost"]["default"] is False and by_name["ghost"]["capabilities"] is None
    assert "workbench_ghost_backend" in by_name["ghost"]["error"]
    assert by_name["ghost"]["hint"] == "pip install ghost"
