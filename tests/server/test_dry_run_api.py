"""POST /workbench/api/jobs?dry_run=true: 200 with the Plan and nothing created; bad input
gets the same 4xx body a real submit gets; no secret in the Plan. Real Jupyter server."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.data.conftest import bucket, moto_endpoint, s3  # noqa: F401 (fixtures)
from tests.server.conftest import body, py
from tests.server.test_jobs_api import error_of

TOKEN = "hf_" + uuid.uuid4().hex


def post(jp_fetch: Any, spec: dict[str, Any], dry: bool = True) -> Any:
    params = {"dry_run": "true"} if dry else {}
    return jp_fetch("workbench", "api", "jobs", method="POST", body=json.dumps(spec), params=params)


def nothing_created(wb_home: Path) -> None:
    jobs = wb_home / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == []


async def test_dry_run_answers_the_plan_and_creates_nothing(jp_fetch, manager, wb_home):
    spec = {"name": "preview", "command": py("print('hi')"), "workers": 2,
            "env": {"LR": "0.1"}, "backend_options": {"runtime": "process"}}  # fmt: skip
    r = await post(jp_fetch, spec)
    assert r.code == 200
    plan = body(r)  # checked against the generated Plan schema by jp_fetch
    assert plan["name"] == "preview" and plan["backend"] == "local"
    assert plan["runtime"] == "process" and plan["workers"] == 2
    assert [p["rank"] for p in plan["placement"]] == [0, 1]
    assert plan["env_names"] == ["LR"]
    page = body(await jp_fetch("workbench", "api", "jobs"))
    assert page["total"] == 0 and manager.store.count(None) == 0
    nothing_created(wb_home)
    code, _err = await error_of(jp_fetch("workbench", "api", "jobs", "preview"))
    assert code == 404
    # The same spec submitted for real is the job the plan described.
    r = await post(jp_fetch, spec, dry=False)
    assert r.code == 201 and body(r)["name"] == "preview"


async def test_dry_run_refuses_what_submit_refuses_with_the_same_body(jp_fetch, wb_home):
    cases = [
        {"command": ["python"], "workers": 0},
        {"command": ["python"], "colour": "red"},
        {"command": ["no-such-program-xyz"]},
        {"command": ["python", "no_such_script.py"]},
        {"command": ["python"], "backend_options": {"zone": "a"}},
        {"command": ["python"], "backend_options": {"runtime": "vm"}},
        {"command": ["python"], "backend_options": "runtime=process"},
        {"command": ["python", "-c", "pass"], "gpus": 1},  # 409: no GPU on this host
    ]
    for spec in cases:
        dry = await error_of(post(jp_fetch, spec))
        real = await error_of(post(jp_fetch, spec, dry=False))
        assert dry == real, (spec, dry, real)
        assert dry[0] in (400, 409)
    code, err = await error_of(post(jp_fetch, cases[4]))
    assert (code, err["field"]) == (400, "backend_options.zone")
    assert "valid options: runtime" in err["fix"]
    code, err = await error_of(
        jp_fetch("workbench", "api", "jobs", method="POST", body="{}", params={"dry_run": "maybe"})
    )
    assert (code, err["field"]) == (400, "dry_run")
    nothing_created(wb_home)


async def test_dry_run_shows_no_secret(jp_fetch, wb_home, s3, bucket):  # noqa: F811
    s3.put_object(Bucket=bucket, Key="train/a.txt", Body=b"alpha")
    key_secret = f"sk/{uuid.uuid4().hex}"
    db_pw = uuid.uuid4().hex
    spec = {
        "command": [*py("print(1)"), f"--db=postgres://u:{db_pw}@db/x"],
        "data": [f"s3://AKIDREST:{key_secret}@{bucket}/train:inp"],
        "env": {"HF_TOKEN": TOKEN, "DATABASE_URL": f"postgres://u:{db_pw}@db/x"},
    }
    r = await post(jp_fetch, spec)
    text = r.body.decode()
    for secret in (key_secret, "AKIDREST", TOKEN, db_pw):
        assert secret not in text
    plan = json.loads(text)
    assert plan["mounts"] == [{"source": f"s3://***@{bucket}/train", "target": "inp", "mode": "ro"}]
    assert plan["env_names"] == ["DATABASE_URL", "HF_TOKEN"]
    nothing_created(wb_home)
