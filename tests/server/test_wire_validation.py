"""The server tests' jp_fetch validates every workbench/api JSON response against
docs/openapi.yaml: prove the check is live and catches drift."""

from __future__ import annotations

import json
from types import SimpleNamespace

import jsonschema
import pytest
from tornado.httpclient import HTTPClientError

from tests.server.conftest import body, validate_response


async def test_a_drifted_response_fails_validation(jp_fetch):
    real = await jp_fetch("workbench", "api", "jobs")
    page = body(real)
    validate_response(("workbench", "api", "jobs"), "GET", real)  # the real one passes
    page["surprise"] = 1  # a key the generated schema does not describe
    drifted = SimpleNamespace(code=200, headers=real.headers, body=json.dumps(page).encode())
    with pytest.raises(jsonschema.ValidationError):
        validate_response(("workbench", "api", "jobs"), "GET", drifted)


async def test_an_undocumented_status_fails(jp_fetch):
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("workbench", "api", "jobs", "no-such-job")
    error = missing.value.response
    assert error is not None and error.code == 404
    teapot = SimpleNamespace(code=418, headers=error.headers, body=error.body)
    with pytest.raises(AssertionError, match=r"418 is not in docs/openapi\.yaml"):
        validate_response(("workbench", "api", "jobs", "no-such-job"), "GET", teapot)
