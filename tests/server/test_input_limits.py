"""Hostile or careless input to the REST API: every rejection is a 4xx JSON error naming
the field, never a 500, and creates nothing; the job list is strict JSON even when the
store holds a NaN."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tornado.httpclient import HTTPClientError

from tests.server.conftest import body
from workbench.spec import JobRecord, JobStatus, TrainSpec

PROGRAM = ["no-such-program-wbfuzz", "train.py"]  # a spec that slips through stops at submit


def strict_json(text: str) -> Any:
    """Parse like a browser's JSON.parse: NaN and Infinity are errors."""

    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


async def post(jp_fetch: Any, payload: str | bytes) -> tuple[int, dict[str, Any]]:
    try:
        r = await jp_fetch(
            "workbench", "api", "jobs", method="POST", body=payload, allow_nonstandard_methods=True
        )
    except HTTPClientError as e:
        assert e.response is not None
        text = e.response.body.decode()
        assert "Traceback" not in text
        return e.code, strict_json(text)
    return r.code, body(r)


async def assert_nothing_created(jp_fetch: Any, home: Path) -> None:
    listed = strict_json((await jp_fetch("workbench", "api", "jobs")).body.decode())
    assert listed["total"] == 0, [j["name"] for j in listed["jobs"]]
    jobs = home / "jobs"
    assert not jobs.exists() or not any(jobs.iterdir()), list(jobs.iterdir())


def spec(**fields: Any) -> str:
    # allow_nan: send what a careless client sends (Python's json writes NaN/Infinity)
    return json.dumps({"command": ["python", "-c", "pass"], **fields})


MB20 = "x" * (20 * 1024 * 1024)


async def test_issue_inputs_are_4xx_naming_the_field(jp_fetch, wb_home):
    cases: list[tuple[str | bytes, int, str]] = [
        # numbers: once tracebacks or 500s
        (spec(workers=math.inf), 400, "workers"),
        (spec(workers=math.nan), 400, "workers"),
        (spec(gpus=math.inf), 400, "gpus"),
        (spec(max_retries=1e400), 400, "max_retries"),
        (spec(procs_per_worker=10**400), 400, "procs_per_worker"),
        (spec(workers=10**400), 400, "workers"),
        (spec(cpu=math.nan), 400, "cpu"),
        (spec(cpu="nan"), 400, "cpu"),
        # types accepted before
        (spec(priority=["a"]), 400, "priority"),
        (spec(queue={"q": 1}), 400, "queue"),
        (spec(env=[1, 2]), 400, "env"),
        (spec(memory={"x": 1}), 400, "memory"),
        (spec(working_dir=5), 400, "working_dir"),
        (spec(working_dir=["/tmp"]), 400, "working_dir"),
        # NUL bytes: once 201, then a failure in the supervisor
        (spec(command=["python", "-c", "pass\x00"]), 400, "command"),
        (spec(env={"A": "x\x00y"}), 400, "env.A"),
        (spec(data=["/tmp:/dst\x00"]), 400, "data"),
        # trailing newlines in names and env keys
        (spec(name="job\n"), 400, "name"),
        (spec(env={"LR\n": "1"}), 400, "env"),
        # sizes: the 20 MB values grew the server to 750 MB
        (spec(priority="p" * 300), 400, "priority"),
        (spec(env={"A": "v" * 40_000}), 400, "env.A"),
        (spec(command=["python", "x" * 70_000]), 400, "command"),
        (spec(command=["python", MB20]), 413, "body"),
        (spec(env={"A": MB20}), 413, "body"),
        (spec(priority=MB20), 413, "body"),
        # nesting
        ("[" * 100_000 + "]" * 100_000, 400, "body"),
        ('{"command": ' + "[" * 100_000 + "]" * 100_000 + "}", 400, "body"),
        (spec(env={"A": json.loads("[" * 500 + "]" * 500)}), 400, "env"),
        # a lone surrogate: no file, env or SQLite text takes it
        ('{"command": ["python", "\\ud800"]}', 400, "command"),
    ]
    for payload, status, field in cases:
        code, err = await post(jp_fetch, payload)
        assert code == status, (str(payload)[:80], err)
        assert err["error"] and err["status"] == status
        if status == 400:
            assert err["field"] == field, (str(payload)[:80], err)
        else:
            assert err["error"].startswith(f"{field}:"), err
        assert len(err["error"]) < 2000
    await assert_nothing_created(jp_fetch, wb_home)


async def test_huge_integer_query_parameters_are_400(jp_fetch):
    for params, field in (
        ({"offset": "1" * 23}, "offset"),
        ({"offset": str(2**63)}, "offset"),
        ({"limit": "9" * 5000}, "limit"),
        ({"offset": "1e400"}, "offset"),
    ):
        try:
            await jp_fetch("workbench", "api", "jobs", params=params)
        except HTTPClientError as e:
            assert e.response is not None
            assert (e.code, strict_json(e.response.body.decode())["field"]) == (400, field)
        else:
            raise AssertionError(f"{params} was accepted")
    for params in ({"tail": "9" * 30}, {"rank": "9" * 30}):
        try:
            await jp_fetch("workbench", "api", "jobs", "ghost", "logs", params=params)
        except HTTPClientError as e:
            assert e.code == 400, params
    for value in ("1e400", "nan", "inf", "9" * 400):
        try:
            await jp_fetch("workbench", "api", "gpus", params={"seconds": value})
        except HTTPClientError as e:
            assert e.code in (400, 503), value  # 503: no GPU monitor on this host, checked later
            if e.code == 400:
                assert e.response is not None
                assert strict_json(e.response.body.decode())["field"] == "seconds"


async def test_a_stored_nan_does_not_break_the_job_list(jp_fetch, manager):
    """A record an older version stored with cpu NaN: every client must still parse the list."""
    store = manager.backend().store
    store.insert(
        JobRecord(
            name="old-nan",
            status=JobStatus.SUCCEEDED,
            backend="local",
            spec={"command": ["true"], "cpu": math.nan, "gpus": math.inf},
            image="x",
        )
    )
    listed = strict_json((await jp_fetch("workbench", "api", "jobs")).body.decode())
    (job,) = listed["jobs"]
    assert job["name"] == "old-nan"
    # spec_json keeps NaN (json.dumps writes it); the wire turns it into null
    assert job["spec"]["cpu"] is None and job["spec"]["gpus"] is None and job["gpus_total"] is None
    one = strict_json((await jp_fetch("workbench", "api", "jobs", "old-nan")).body.decode())
    assert one["spec"]["cpu"] is None


# ---- property: hostile values for every field, over real HTTP --------------------------------

HUGE = 10**400
nasty_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "\x00", "a\x00b", "job\n", "\ud800", "1e400", "nan", "-1", "../x"]),
    st.integers(5_000, 120_000).map(lambda n: "x" * n),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([HUGE, -HUGE, 2**63, math.nan, math.inf, -math.inf]),
    st.floats(),
    nasty_text,
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)
# Every field TrainSpec has (and its aliases), so a new field is fuzzed without a list to update.
FIELDS = [f.name for f in dataclasses.fields(TrainSpec)] + sorted(TrainSpec.ALIASES)


async def test_any_field_value_is_a_4xx_that_creates_nothing(
    jp_fetch, http_server, jp_http_port, jp_auth_header, jp_base_url, wb_home
):
    url = f"http://127.0.0.1:{jp_http_port}{jp_base_url}workbench/api/jobs"
    codes: dict[int, int] = {}

    @settings(
        max_examples=120, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    @given(field=st.sampled_from(FIELDS), value=values)
    def fuzz(field: str, value: Any) -> None:
        # runtime=process: no container engine probe; the program is on no PATH, so a value
        # that happens to be valid still ends in a 400 before anything is created
        data = json.dumps({"command": PROGRAM, "runtime": "process", field: value}).encode()
        request = urllib.request.Request(
            url,
            data=data,
            method="POST",
            headers={**jp_auth_header, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode()
        codes[status] = codes.get(status, 0) + 1
        assert 400 <= status < 500, (field, str(value)[:200], status, text[:500])
        err = strict_json(text)
        assert err["status"] == status and "Traceback" not in text
        if status == 400:
            assert err["field"], err
        jobs = wb_home / "jobs"
        assert not jobs.exists() or not any(jobs.iterdir()), (field, str(value)[:200])

    await asyncio.to_thread(fuzz)
    assert codes.get(400, 0) > 50, codes  # the fuzz reached validation, not just auth
    await assert_nothing_created(jp_fetch, wb_home)
