"""The wire schema has one source (workbench.wireschema) and docs/openapi.yaml cannot drift from it."""

from __future__ import annotations

import dataclasses
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest
import yaml

from tests.conftest import ROOT
from workbench import wireschema
from workbench._wire_types import TRAIN_SPEC_EXAMPLE
from workbench.errors import SpecError
from workbench.spec import JobEvent, JobRecord, JobStatus, RankRecord, RankState, TrainSpec

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
        ranks=[RankRecord(rank=0, state=RankState.RUNNING, details={"pid": 3})],
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


# ---- the portable wire model (design11 "Wire model") -----------------------------------

LOCAL_ONLY_TOP = {"job_dir", "runtime", "gpus"}  # local concepts: under details, or renamed


def _record(**kw) -> JobRecord:
    values = dict(
        name="w",
        status=JobStatus.RUNNING,
        backend="local",
        spec={"workers": 3, "gpus": 0.5, "max_retries": 2},
        image="img",
        runtime="container",
        job_dir="/jobs/w",
        attempt=2,
        started_at=time.time(),
        details={"supervisor_pid": 7, "runtime": "container"},
        ranks=[
            RankRecord(
                rank=0,
                state=RankState.RUNNING,
                gpu_devices="0",
                node="host-a",
                restarts=1,
                details={"pid": 11, "ctime": 1.5, "node": "host-a"},
            ),
            RankRecord(rank=1, state=RankState.PENDING),
        ],
        events=[JobEvent(time.time(), "Started", "2 worker(s) started")],
    )
    values.update(kw)
    return JobRecord(**values)  # type: ignore[arg-type]


def test_backend_state_lives_under_details_and_gpus_have_two_names() -> None:
    wire = _record().to_dict()
    assert not LOCAL_ONLY_TOP & set(wire)
    assert wire["details"] == {"supervisor_pid": 7, "runtime": "container", "job_dir": "/jobs/w"}
    assert (wire["gpus_per_worker"], wire["gpus_total"], wire["workers"]) == (0.5, 1.5, 3)
    assert (wire["attempt"], wire["restarts"], wire["node"]) == (2, 1, "host-a")
    rank0, rank1 = wire["ranks"]
    assert not {"pid", "gpus"} & set(rank0)
    assert rank0["gpu_devices"] == "0" and rank0["node"] == "host-a" and rank0["restarts"] == 1
    assert rank0["details"] == {"pid": 11, "ctime": 1.5}  # node is promoted, not repeated
    assert rank1["node"] is None and rank1["gpu_devices"] is None
    # the Python attributes still answer, read from the same state
    record = _record()
    assert record.job_dir == "/jobs/w" and record.ranks[0].pid == 11 and record.ranks[1].pid is None


def test_no_ranks_no_node_and_restarts_never_negative() -> None:
    wire = _record(ranks=[], attempt=1).to_dict()
    assert wire["node"] is None and wire["restarts"] == 0
    assert _record(attempt=0).to_dict()["restarts"] == 0  # a hand-built record: still >= 0


def test_empty_message_is_null() -> None:
    assert _record(message="").to_dict()["message"] is None
    assert _record(message="waiting for GPUs").to_dict()["message"] == "waiting for GPUs"


def _ev(reason: str, level: str = "info") -> JobEvent:
    return JobEvent(time.time(), reason, reason.lower(), level)


@pytest.mark.parametrize(
    ("status", "events", "exit_codes", "reason"),
    [
        (JobStatus.PENDING, [], [], "Submitted"),
        (JobStatus.PENDING, [_ev("Submitted"), _ev("Queued")], [], "Queued"),
        # a GPU alert or a staging step notes something; it is not why the job runs
        (JobStatus.RUNNING, [_ev("Submitted"), _ev("Started"), _ev("GpuAlert:temperature")],
         [None], "Started"),
        (JobStatus.RUNNING, [_ev("Started"), _ev("RankFailed"), _ev("Restarting")], [None],
         "Restarting"),
        (JobStatus.FAILED, [_ev("Started"), _ev("RankFailed"), _ev("Failed", "error")], [3, None],
         "NonZeroExit"),
        (JobStatus.FAILED, [_ev("Started"), _ev("Failed", "error")], [None], "Failed"),
        (JobStatus.FAILED, [_ev("Started"), _ev("SupervisorLost", "error")], [None],
         "SupervisorLost"),
        (JobStatus.FAILED, [_ev("Started"), _ev("DeadlineExceeded")], [1], "DeadlineExceeded"),
        (JobStatus.SUCCEEDED, [_ev("Started"), _ev("Succeeded"), _ev("OutputsUploaded")], [0],
         "Succeeded"),
        (JobStatus.CANCELLED, [_ev("Started"), _ev("Cancelled", "warning")], [None],
         "Cancelled"),
        # an ended job whose status event went missing: its status, never "Started"
        (JobStatus.SUCCEEDED, [_ev("Started")], [0], "Succeeded"),
    ],
)  # fmt: skip
def test_reason_is_the_cause_of_the_current_status(status, events, exit_codes, reason) -> None:
    ranks = [RankRecord(rank=i, exit_code=c) for i, c in enumerate(exit_codes)]
    assert _record(status=status, events=events, ranks=ranks).to_dict()["reason"] == reason


def test_a_real_local_job_on_the_wire(manager) -> None:
    """A 2-worker local job whose rank 1 exits 3 after one gang restart: the wire names the
    cause, the restarts, the host, and keeps the local state under details."""
    code = "import os, sys; sys.exit(3 if os.environ['RANK'] == '1' else 0)"
    spec = {"command": [sys.executable, "-c", code], "name": "wire-fail", "workers": 2,
            "max_retries": 1, "runtime": "process"}  # fmt: skip
    manager.submit(TrainSpec.from_dict(spec))
    done = manager.wait("wire-fail", timeout=60)
    assert done.status is JobStatus.FAILED, (done.message, done.events)
    wire = done.to_dict()
    doc = {"components": {"schemas": wireschema.schemas()}}
    jsonschema.validate(wire, {"$ref": "#/components/schemas/JobRecord", **doc})
    assert (wire["reason"], wire["attempt"], wire["restarts"]) == ("NonZeroExit", 2, 1)
    assert wire["node"] == socket.gethostname()
    assert [r["node"] for r in wire["ranks"]] == [socket.gethostname()] * 2
    assert [r["restarts"] for r in wire["ranks"]] == [1, 1]
    assert wire["ranks"][1]["exit_code"] == 3 and wire["ranks"][1]["details"]["pid"] > 0
    details = wire["details"]
    assert details["runtime"] == "process" and Path(details["job_dir"]).is_dir()
    assert details["supervisor_pid"] > 0
    assert (wire["gpus_per_worker"], wire["gpus_total"]) == (0.0, 0.0)


def test_one_name_for_gpus_per_worker_on_input_too() -> None:
    """A client may send the name it reads back (gpus_per_worker); both at once is an error."""
    spec = TrainSpec.from_dict({"command": ["true"], "gpus_per_worker": 0.5}).validate()
    assert spec.gpus == 0.5
    try:
        TrainSpec.from_dict({"command": ["true"], "gpus": 1, "gpus_per_worker": 0.5})
    except SpecError as e:
        assert e.field == "gpus_per_worker" and "second time" in str(e)
    else:
        raise AssertionError("gpus and gpus_per_worker together were accepted")
    from workbench.catalog import load_catalog

    offer = load_catalog().spec("gpu.1x").to_dict()
    assert offer["gpus_per_worker"] == 1 and "gpus" not in offer


# ---- typed payloads, the request body and the JSON dump --------------------------------


def _json_bodies(openapi: dict) -> list[tuple[str, dict]]:
    """(where, schema) of every JSON request and response body in the document."""
    out = []
    for path, item in openapi["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "responses" not in op:
                continue
            bodies = [("request", op.get("requestBody", {}))]
            bodies += [(code, r) for code, r in op["responses"].items()]
            for code, node in bodies:
                schema = node.get("content", {}).get("application/json", {}).get("schema")
                if schema is not None:
                    out.append((f"{method.upper()} {path} {code}", schema))
    return out


def test_no_payload_is_an_untyped_object() -> None:
    """Every JSON body is a named, generated schema; an object without properties is only a
    field meant to be open (spec, details, tags, history, env)."""
    openapi = yaml.safe_load(OPENAPI.read_text())
    for where, schema in _json_bodies(openapi):
        assert set(schema) == {"$ref"}, f"{where}: inline schema {schema}"
        assert schema["$ref"].removeprefix("#/components/schemas/") in wireschema.schemas()
    for name, schema in wireschema.schemas().items():
        assert schema.get("properties"), f"{name} has no properties"


def test_train_spec_schema_names_every_field_the_server_accepts() -> None:
    props = set(wireschema.schemas()["TrainSpec"]["properties"])
    accepted = {f.name for f in dataclasses.fields(TrainSpec)} | set(TrainSpec.ALIASES)
    assert props == accepted, (props - accepted, accepted - props)
    assert wireschema.schemas()["TrainSpec"]["required"] == ["command"]


def test_the_request_example_is_valid_for_the_schema_and_the_spec() -> None:
    doc = {"components": {"schemas": wireschema.schemas()}}
    (example,) = doc["components"]["schemas"]["TrainSpec"]["examples"]
    jsonschema.validate(example, {"$ref": "#/components/schemas/TrainSpec", **doc})
    spec = TrainSpec.from_dict(example).validate()
    assert (spec.workers, spec.runtime) == (example["workers"], "process")


@pytest.mark.parametrize(
    ("field", "value"),
    [("workers", 0), ("workers", 1025), ("max_retries", -1), ("cpu", 0), ("gpus", -1),
     ("name", "Not_DNS"), ("memory", "lots"), ("runtime", "vm"), ("framework", "jax"),
     ("timeout", "soon"), ("env", {"1BAD": "x"}), ("command", [])],
)  # fmt: skip
def test_the_schema_bounds_agree_with_the_spec_checks(field, value) -> None:
    """What the schema refuses, TrainSpec refuses too (bounds come from _spec_limits)."""
    doc = {"components": {"schemas": wireschema.schemas()}}
    validator = jsonschema.Draft202012Validator({"$ref": "#/components/schemas/TrainSpec", **doc})
    data = {"command": ["true"], field: value}
    assert not validator.is_valid(data)
    with pytest.raises(SpecError) as info:
        TrainSpec.from_dict(data).validate()
    assert info.value.field.split(".")[0] == field


def test_host_payload_enums_match_the_code() -> None:
    from typing import get_args

    from workbench import _wire_types
    from workbench.catalog import FRAMEWORKS
    from workbench.monitor._nvml import MonitorState
    from workbench.server._gpu import UNAVAILABLE
    from workbench.spec import RUNTIMES

    assert get_args(_wire_types.MonitorStateName) == (*(s.value for s in MonitorState), UNAVAILABLE)
    assert get_args(_wire_types.FrameworkName) == FRAMEWORKS
    assert get_args(_wire_types.RuntimeName) == RUNTIMES


def test_host_payloads_validate_what_the_code_writes() -> None:
    """The catalogue, a GPU sample and an alert as their to_dict() writes them."""
    from workbench.catalog import load_catalog
    from workbench.monitor.alerts import Alert
    from workbench.monitor.sampler import GpuSample

    doc = {"components": {"schemas": wireschema.schemas()}}

    def check(name: str, value: object) -> None:
        jsonschema.validate(value, {"$ref": f"#/components/schemas/{name}", **doc})

    catalog = load_catalog()
    check("SpecList", {"specs": [s.to_dict() for s in catalog.specs.values()]})
    check("ImageList", {"images": [dataclasses.asdict(i) for i in catalog.images.values()]})
    sample = GpuSample(0, "GPU-1", "H100", time.time(), 50.0, 1, 2, 60.0,
                       processes=[{"pid": 5, "memory": None}]).to_dict()  # fmt: skip
    alert = Alert("temperature", 0, "GPU-1", "warning", "hot", 91.0, 85.0, time.time()).to_dict()
    state = {"state": "ok", "reason": None, "gpus": [sample], "history": {"0": [sample]},
             "alerts": [alert]}  # fmt: skip
    check("GpuState", state)
    check("Metrics", {"scalars": [{"time": 1.0, "rank": 0, "step": 1, "total": None,
                                   "loss": 0.5, "tag": "x"}],
                      "gpu": [{**sample, "rank": [0, 1]}], "cursor": "0:0"})  # fmt: skip
    try:
        check("GpuState", {**state, "gpus": [{**sample, "surprise": 1}]})
    except jsonschema.ValidationError:
        pass
    else:
        raise AssertionError("an undescribed GPU field passed")


def test_json_dump_is_one_valid_2020_12_document(tmp_path: Path) -> None:
    """`python -m workbench.wireschema --json PATH`, as the panel's TypeScript build runs it."""
    out = tmp_path / "wire.schema.json"
    subprocess.run(
        [sys.executable, "-m", "workbench.wireschema", "--json", str(out)],
        check=True, capture_output=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    doc = json.loads(out.read_text())
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(doc)
    assert set(doc["$defs"]) == set(wireschema.schemas())
    assert "#/components/" not in out.read_text()  # every $ref points into $defs
    validator = jsonschema.Draft202012Validator(doc)
    assert validator.is_valid(_record().to_dict())  # the root is any one wire type
    job = {"$ref": "#/$defs/JobRecord", "$defs": doc["$defs"]}
    jsonschema.Draft202012Validator(job).validate(_record().to_dict())
    assert not jsonschema.Draft202012Validator(job).is_valid({**_record().to_dict(), "gpus": 1})


def test_only_types_are_titled() -> None:
    """A titled field becomes a stray alias in generated TypeScript (`type Name1 = string`)."""
    text = json.dumps(wireschema.json_schema_document())
    titles = text.count('"title"')
    # the document's own title and one per type; a field named "title" would show as a key
    assert titles == 1 + len(wireschema.schemas()), titles


def test_the_stored_spec_is_typed_and_names_every_field() -> None:
    """A JobRecord's spec is what TrainSpec.to_dict() stores: the schema knows every key."""
    spec = TrainSpec.from_dict(TRAIN_SPEC_EXAMPLE).validate()
    props = wireschema.schemas()["SubmittedSpec"]["properties"]
    assert set(props) == set(spec.to_dict())
    wire = _record(spec=spec.redacted().to_dict()).to_dict()
    doc = {"components": {"schemas": wireschema.schemas()}}
    jsonschema.validate(wire, {"$ref": "#/components/schemas/JobRecord", **doc})
    wire["spec"]["surprise"] = 1
    assert not jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/JobRecord", **doc}
    ).is_valid(wire)
