"""The typed wire over real HTTP: the TrainSpec schema's own example is a request the server
accepts, an unknown field is a 400 naming it, and the metrics payload matches its type
(conftest's jp_fetch validates every response and every accepted request body)."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest
from tornado.httpclient import HTTPClientError

from tests.server.conftest import OPENAPI, body, py, submit, wait_done

SCHEMAS = OPENAPI["components"]["schemas"]


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = {"$ref": f"#/components/schemas/{name}", "components": OPENAPI["components"]}
    return jsonschema.Draft202012Validator(schema)


async def test_the_schemas_own_example_is_accepted_and_runs(jp_fetch):
    (example,) = SCHEMAS["TrainSpec"]["examples"]
    created = await submit(jp_fetch, copy.deepcopy(example))
    assert created["name"] == example["name"] and created["workers"] == example["workers"]
    done = await wait_done(jp_fetch, example["name"])
    assert done["status"] == "Succeeded" and done["reason"] == "Succeeded", done["events"]
    # the local backend's state is under details, not at the top level
    assert {"job_dir", "runtime", "gpus"}.isdisjoint(done)
    assert done["details"]["runtime"] == "process" and done["details"]["job_dir"]
    assert [r["exit_code"] for r in done["ranks"]] == [0, 0]


@pytest.mark.parametrize("extra", [{"surprise": 1}, {"gpus_total": 2}, {"job_dir": "/tmp"}])
async def test_an_unknown_field_is_a_400_naming_it_and_the_schema_refuses_it_too(jp_fetch, extra):
    (example,) = SCHEMAS["TrainSpec"]["examples"]
    spec = {**example, **extra}
    (field,) = extra
    assert not _validator("TrainSpec").is_valid(spec)  # the schema is as closed as the server
    with pytest.raises(HTTPClientError) as info:
        await jp_fetch("workbench", "api", "jobs", method="POST", body=json.dumps(spec))
    error = json.loads(info.value.response.body)
    assert info.value.code == 400 and error["field"] == field, error
    listed = body(await jp_fetch("workbench", "api", "jobs"))
    assert listed["total"] == 0  # nothing was created


async def test_gpus_per_worker_is_accepted_on_input(jp_fetch):
    spec = {"name": "alias", "command": py("pass"), "gpus_per_worker": 0, "runtime": "process"}
    created = await submit(jp_fetch, spec)
    assert created["gpus_per_worker"] == 0 and created["spec"]["gpus"] == 0


async def test_metrics_payload_is_typed(jp_fetch):
    code = (
        "from workbench import run\n"
        "for i in range(3): run.log(step=i, total=3, loss=1.0 / (i + 1), phase='train')\n"
        "run.flush()\n"
    )
    await submit(jp_fetch, {"name": "scalars", "command": py(code), "runtime": "process"})
    done = await wait_done(jp_fetch, "scalars")
    assert done["status"] == "Succeeded", done["events"]
    metrics = body(await jp_fetch("workbench", "api", "jobs", "scalars", "metrics"))
    assert [(s["step"], s["loss"], s["phase"]) for s in metrics["scalars"]][-1] == (
        2, 1.0 / 3, "train"
    )  # fmt: skip
    assert metrics["gpu"] == []  # no GPU here; its records' type is checked all the same
