"""The wire schema has one source (workbench.wireschema) and docs/openapi.yaml cannot drift from it."""

from __future__ import annotations

import time

import jsonschema
import yaml

from tests.conftest import ROOT
from workbench import wireschema
from workbench.spec import JobEvent, JobRecord, JobStatus, RankRecord, RankState

OPENAPI = ROOT / "docs" / "openapi.yaml"


def test_committed_openapi_matches_the_generator() -> None:
    current = OPENAPI.read_text()
    assert wireschema.openapi_text(current) == current, (
        "docs/openapi.yaml drifted from workbench.wireschema: run "
        "`python -m workbench.wireschema --openapi` and commit the result"
    )


def test_every_field_has_a_description() -> None:
    for name, schema in wireschema.schemas().items():
        assert schema.get("description"), name
        for field, prop in schema["properties"].items():
            assert prop.get("description"), f"{name}.{field}"


def test_to_dict_validates_and_the_schema_names_every_key() -> None:
    record = JobRecord(
        name="j",
        status=JobStatus.RUNNING,
        backend="local",
        spec={"workers": 2},
        image="img",
        started_at=time.time(),
        details={"supervisor_pid": 1},
        ranks=[RankRecord(rank=0, state=RankState.RUNNING, pid=3)],
        events=[JobEvent(time=time.time(), reason="Started", message="m")],
    )
    doc = {"components": {"schemas": wireschema.schemas()}}
    wire = record.to_dict()
    jsonschema.validate(wire, {"$ref": "#/components/schemas/JobRecord", **doc})
    schema = wireschema.schemas()["JobRecord"]
    assert set(wire) == set(schema["properties"]) == set(schema["required"])
    wire["surprise"] = 1  # drift: a key the schema does not describe
    try:
        jsonschema.validate(wire, {"$ref": "#/components/schemas/JobRecord", **doc})
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("an undescribed key passed")


def test_openapi_is_a_valid_openapi_31_document() -> None:
    from openapi_spec_validator import validate

    validate(yaml.safe_load(OPENAPI.read_text()))


def test_state_names_match_the_enums() -> None:
    schemas = wireschema.schemas()
    assert schemas["JobRecord"]["properties"]["status"]["enum"] == [s.value for s in JobStatus]
    assert schemas["RankRecord"]["properties"]["state"]["enum"] == [s.value for s in RankState]
