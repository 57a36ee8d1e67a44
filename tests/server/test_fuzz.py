"""Property-based fuzz of every route in docs/openapi.yaml (schemathesis): no 5xx, ever."""

from __future__ import annotations

import asyncio
import collections
import json
import os
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tests.conftest import ROOT

OPENAPI = ROOT / "docs" / "openapi.yaml"


@pytest.fixture
def no_programs_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fuzzed specs may name real programs: leave only the interpreter's folder to find them in."""
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))


@pytest.mark.slow
async def test_fuzz_finds_no_server_error(
    no_programs_on_path, http_server, jp_http_port, jp_auth_header, jp_base_url
):
    schema = schemathesis.openapi.from_path(str(OPENAPI))
    base = f"http://127.0.0.1:{jp_http_port}{jp_base_url.rstrip('/')}"
    seen: collections.Counter[tuple[str, int]] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()  # 403s that are the token's

    @settings(
        max_examples=int(os.environ.get("WORKBENCH_FUZZ_EXAMPLES", "120")),
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=schema.as_strategy())
    def fuzz(case: schemathesis.Case) -> None:
        response = case.call(base_url=base, headers=dict(jp_auth_header), timeout=20)
        seen[(f"{case.method} {case.path}", response.status_code)] += 1
        # A fuzzed local path outside the server's root is refused on its own (403 naming
        # field url); any other 403 means the token was.
        if response.status_code == 403 and _field(response.text) != "url":
            refused[f"{case.method} {case.path}"] += 1
        assert response.status_code < 500, (
            case.method,
            case.formatted_path,
            case.query,
            case.body,
            response.text,
        )
        assert "Traceback" not in response.text

    # The server runs on this thread's event loop; the fuzzer's blocking calls go elsewhere.
    await asyncio.to_thread(fuzz)
    operations = {op for op, _ in seen}
    assert len(operations) >= 10, operations  # the strategy reached (nearly) every route
    assert not refused, f"the token was refused: the fuzz tested nothing ({refused})"
    assert any(200 <= code < 300 for _, code in seen)


def _field(text: str) -> object:
    """The ``field`` of a JSON error body (None for any other body)."""
    try:
        body = json.loads(text)
    except ValueError:
        return None
    return body.get("field") if isinstance(body, dict) else None
