"""jobs routes against the real local backend through a real Jupyter server (non-root base_url)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.conftest import job_processes
from tests.server.conftest import body, py, submit, wait_done


async def error_of(coro: Any) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of a request expected to fail."""
    with pytest.raises(HTTPClientError) as info:
        await coro
    response = info.value.response
    assert response is not None
    assert response.headers["Content-Type"].startswith("application/json")
    text = response.body.decode()
    assert "Traceback" not in text
    return info.value.code, json.loads(text)


async def test_submit_get_list_logs(jp_fetch, jp_base_url):
    spec = {"name": "hello-api", "command": py("for i in range(5): print('line', i)")}
    r = await jp_fetch("workbench", "api", "jobs", method="POST", body=json.dumps(spec))
    assert r.code == 201
    assert r.headers["Location"] == f"{jp_base_url}workbench/api/jobs/hello-api"
    created = body(r)
    # A fast job may already have finished by the time POST answers: any state is valid here.
    assert created["name"] == "hello-api" and created["status"] in (
        "Pending",
        "Running",
        "Succeeded",
    )
    done = await wait_done(jp_fetch, "hello-api")
    assert done["status"] == "Succeeded", done["message"]
    assert done["ranks"][0]["exit_code"] == 0

    logs = await jp_fetch("workbench", "api", "jobs", "hello-api", "logs")
    assert logs.headers["Content-Type"].startswith("text/plain")
    assert logs.body.decode().splitlines() == [f"line {i}" for i in range(5)]
    tail = await jp_fetch("workbench", "api", "jobs", "hello-api", "logs", params={"tail": 2})
    assert tail.body.decode().splitlines() == ["line 3", "line 4"]

    listed = body(await jp_fetch("workbench", "api", "jobs"))
    assert [j["name"] for j in listed["jobs"]] == ["hello-api"] and listed["total"] == 1
    ok = body(await jp_fetch("workbench", "api", "jobs", params={"status": "Succeeded"}))
    assert ok["total"] == 1
    none = body(await jp_fetch("workbench", "api", "jobs", params={"status": "Running,Pending"}))
    assert none == {"jobs": [], "total": 0, "offset": 0, "limit": 100}
    local = body(await jp_fetch("workbench", "api", "jobs", params={"backend": "local"}))
    assert local["total"] == 1


async def test_pagination_and_filters(jp_fetch, manager):
    from workbench.spec import JobRecord, JobStatus

    store = manager.backend().store
    for i in range(7):
        status = JobStatus.SUCCEEDED if i % 2 else JobStatus.FAILED
        store.insert(JobRecord(name=f"page-{i}", status=status, backend="local",
                               spec={"command": ["true"]}, image="x", created_at=1000.0 + i))  # fmt: skip
    first = body(await jp_fetch("workbench", "api", "jobs", params={"limit": 3}))
    assert [j["name"] for j in first["jobs"]] == ["page-6", "page-5", "page-4"]
    assert first["total"] == 7
    rest = body(await jp_fetch("workbench", "api", "jobs", params={"limit": 3, "offset": 6}))
    assert [j["name"] for j in rest["jobs"]] == ["page-0"]
    failed = body(await jp_fetch("workbench", "api", "jobs", params={"status": "failed"}))
    assert {j["name"] for j in failed["jobs"]} == {"page-0", "page-2", "page-4", "page-6"}

    for params, field in (({"limit": 0}, "limit"), ({"limit": "x"}, "limit"),
                          ({"offset": -1}, "offset"), ({"status": "Sleeping"}, "status"),
                          ({"backend": "mars"}, "backend")):  # fmt: skip
        code, err = await error_of(jp_fetch("workbench", "api", "jobs", params=params))
        assert (code, err["field"]) == (400, field), err


async def test_bad_specs_are_400_with_the_field(jp_fetch):
    cases = [
        ({"command": ["python"], "workers": 0}, "workers"),
        ({"command": ["python"], "colour": "red"}, "colour"),
        ({"workers": 2}, "command"),
        ({"command": ["no-such-program-xyz"]}, "command"),
        ({"command": ["python"], "image": "nope"}, "image"),
        ({"command": ["python"], "data": ["::"]}, "data"),
        ({"command": "python -c 'unbalanced"}, "command"),  # once a 500, found by the fuzz
    ]
    for spec, field in cases:
        code, err = await error_of(
            jp_fetch("workbench", "api", "jobs", method="POST", body=json.dumps(spec))
        )
        assert code == 400 and err["field"] == field, (spec, err)
        assert err["error"] and err["status"] == 400
    for raw in ("{not json", "[1, 2]", ""):
        code, err = await error_of(
            jp_fetch(
                "workbench", "api", "jobs", method="POST", body=raw, allow_nonstandard_methods=True
            )
        )
        assert (code, err["field"]) == (400, "body")


async def test_gpus_on_a_cpu_host_is_409_not_500(jp_fetch):
    spec = {"command": ["python", "-c", "pass"], "gpus": 1}
    code, err = await error_of(
        jp_fetch("workbench", "api", "jobs", method="POST", body=json.dumps(spec))
    )
    assert code == 409 and "GPU" in err["error"]


async def test_unknown_job_is_404_everywhere(jp_fetch):
    for parts, method, extra in (
        (("ghost",), "GET", {}),
        (("ghost",), "DELETE", {}),
        (("ghost", "logs"), "GET", {}),
        (("ghost", "metrics"), "GET", {}),
        (("ghost", "rerun"), "POST", {"body": "{}"}),
    ):
        code, err = await error_of(
            jp_fetch("workbench", "api", "jobs", *parts, method=method, **extra)
        )
        assert code == 404 and err["name"] == "ghost", (parts, err)


async def test_delete_cancels_and_purge_forgets(jp_fetch):
    await submit(
        jp_fetch,
        {"name": "sleepy", "command": py("import time; print('up', flush=True); time.sleep(60)")},
    )
    deadline = time.monotonic() + 30
    while not job_processes("sleepy"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    r = await jp_fetch("workbench", "api", "jobs", "sleepy", method="DELETE")
    assert body(r)["status"] == "Cancelled"
    assert job_processes("sleepy") == []
    r = await jp_fetch(
        "workbench", "api", "jobs", "sleepy", method="DELETE", params={"purge": "true"}
    )
    assert r.code == 204
    code, _ = await error_of(jp_fetch("workbench", "api", "jobs", "sleepy"))
    assert code == 404


async def test_rerun_runs_the_snapshot_again(jp_fetch, jp_base_url, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('version one')\n")
    await submit(
        jp_fetch, {"name": "orig", "command": ["python", "train.py"], "working_dir": str(tmp_path)}
    )
    assert (await wait_done(jp_fetch, "orig"))["status"] == "Succeeded"
    script.write_text("print('version two')\n")  # the rerun must use the snapshot
    r = await jp_fetch("workbench", "api", "jobs", "orig", "rerun", method="POST", body="")
    assert r.code == 201
    again = body(r)
    assert again["name"] == "orig-r1"
    assert r.headers["Location"] == f"{jp_base_url}workbench/api/jobs/orig-r1"
    assert (await wait_done(jp_fetch, "orig-r1"))["status"] == "Succeeded"
    logs = await jp_fetch("workbench", "api", "jobs", "orig-r1", "logs")
    assert logs.body.decode().strip() == "version one"
    named = body(await jp_fetch("workbench", "api", "jobs", "orig", "rerun", method="POST",
                                body=json.dumps({"name": "orig-named"})))  # fmt: skip
    assert named["name"] == "orig-named"
    code, err = await error_of(
        jp_fetch(
            "workbench", "api", "jobs", "orig", "rerun", method="POST", body=json.dumps({"x": 1})
        )
    )
    assert (code, err["field"]) == (400, "x")


async def test_metrics_of_a_job_that_reports(jp_fetch):
    code = "from workbench import run\nfor i in range(3): run.log(step=i, total=3, loss=1.0 / (i + 1))\nrun.flush()"
    await submit(
        jp_fetch, {"name": "reporter", "command": py(code), "env": {"WORKBENCH_RUN_INTERVAL": "0"}}
    )
    assert (await wait_done(jp_fetch, "reporter"))["status"] == "Succeeded"
    metrics = body(await jp_fetch("workbench", "api", "jobs", "reporter", "metrics"))
    assert [m["step"] for m in metrics["scalars"]] == [0, 1, 2]
    assert metrics["scalars"][-1]["loss"] == pytest.approx(1 / 3)
    assert metrics["gpu"] == []  # no GPU here
    last = body(
        await jp_fetch("workbench", "api", "jobs", "reporter", "metrics", params={"limit": 1})
    )
    assert [m["step"] for m in last["scalars"]] == [2]
    # since=<cursor>: only what came after it (nothing, the job is done); "" = the start
    url = ("workbench", "api", "jobs", "reporter", "metrics")
    newer = body(await jp_fetch(*url, params={"since": metrics["cursor"]}))
    assert newer == {"scalars": [], "gpu": [], "cursor": metrics["cursor"]}
    again = body(await jp_fetch(*url, params={"since": ""}))
    assert [m["step"] for m in again["scalars"]] == [0, 1, 2]
    code, err = await error_of(jp_fetch(*url, params={"since": "/etc/passwd=0"}))
    assert (code, err["field"]) == (400, "since")


async def test_cli_submitted_jobs_are_the_same_jobs(jp_fetch, wb_home):
    env = dict(os.environ)
    out = subprocess.run(
        [str(Path(sys.executable).parent / "workbench"), "submit", "--name", "from-cli", "--wait",
         "--", "python", "-c", "print('from the cli')"],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    record = body(await jp_fetch("workbench", "api", "jobs", "from-cli"))
    assert record["status"] == "Succeeded"
    logs = await jp_fetch("workbench", "api", "jobs", "from-cli", "logs")
    assert logs.body.decode().strip() == "from the cli"


async def test_routes_live_under_base_url_only(
    jp_fetch, http_server_client, jp_auth_header, jp_base_url
):
    assert jp_base_url != "/"
    with pytest.raises(HTTPClientError) as info:
        await http_server_client.fetch("/workbench/api/jobs", headers=jp_auth_header)
    assert info.value.code == 404
    r = await http_server_client.fetch(f"{jp_base_url}workbench/api/jobs", headers=jp_auth_header)
    assert r.code == 200
