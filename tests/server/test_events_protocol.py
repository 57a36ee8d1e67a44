"""WebSocket protocol v1 (docs/server.md): the event stream follows the store's change
feed; hello, resume with ?since=, reset, close 4400, and no job listing per change."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema

from tests.server.conftest import py, submit, wait_done
from workbench import wireschema
from workbench._store_schema import CHANGES_KEPT
from workbench.manager import JobManager
from workbench.spec import JobRecord, JobStatus
from workbench.store import JobStore

EVENTS = ("workbench", "api", "events")


SCHEMAS = {"components": {"schemas": wireschema.schemas()}}
EVENT_SCHEMA = {
    "hello": "EventHello",
    "job": "EventJob",
    "job_deleted": "EventJobDeleted",
    "reset": "EventReset",
    "gpu": "EventGpu",
    "metrics": "EventMetrics",
    "error": "EventError",
}


async def read(ws: Any, timeout: float = 20) -> dict[str, Any]:
    """The next message, checked against its generated schema (fails on a closed stream
    or after ``timeout``)."""
    raw = await asyncio.wait_for(ws.read_message(), timeout)
    assert raw is not None, f"the event stream closed: {ws.close_code} {ws.close_reason}"
    return check(dict(json.loads(raw)))


def check(msg: dict[str, Any]) -> dict[str, Any]:
    """``msg``, validated against the generated schema of its type."""
    ref = f"#/components/schemas/{EVENT_SCHEMA[msg['type']]}"
    jsonschema.Draft202012Validator({"$ref": ref, **SCHEMAS}).validate(msg)
    return msg


async def job_messages(ws: Any, expect: int, quiet: float = 1.0) -> list[dict[str, Any]]:
    """The next ``expect`` job/job_deleted/reset messages (waiting as long as a loaded
    machine needs), then any more that arrive within ``quiet`` seconds (there should be none)."""
    out: list[dict[str, Any]] = []
    while True:
        try:
            msg = await read(ws, timeout=30 if len(out) < expect else quiet)
        except asyncio.TimeoutError:
            assert len(out) >= expect, f"only {out} arrived"
            return out
        if msg["type"] != "gpu":
            out.append(msg)


def _record(name: str) -> JobRecord:
    return JobRecord(
        name=name, status=JobStatus.SUCCEEDED, backend="local", spec={"name": name},
        image="img", runtime="process", created_at=time.time(),
    )  # fmt: skip


async def test_a_cli_job_reaches_the_websocket_within_a_second_without_a_list_call(
    jp_ws_fetch, jp_serverapp, manager, monkeypatch
):
    for i in range(30):  # jobs a listing would have to read
        manager.store.insert(_record(f"old-{i}"))
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1"})
    hello = await read(ws)
    assert hello["type"] == "hello" and hello["protocol"] == 1 and hello["resumed"] is False
    assert hello["jobs"]["Succeeded"] == 30 and hello["last_id"] == 30
    # From here on, count every call that lists or counts jobs, and every SQL statement
    # the server's store runs (the server runs in this process under pytest-jupyter).
    calls: list[str] = []
    statements: list[str] = []
    for cls, names in ((JobStore, ("list", "count")), (JobManager, ("list", "page", "counts"))):
        for name in names:
            real = getattr(cls, name)

            def counted(self, *a, _real=real, _name=f"{cls.__name__}.{name}", **k):  # type: ignore[no-untyped-def]
                calls.append(_name)
                return _real(self, *a, **k)

            monkeypatch.setattr(cls, name, counted)
    real_conn = JobStore._conn

    def traced(self):  # type: ignore[no-untyped-def]
        conn = real_conn(self)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(JobStore, "_conn", traced)
    workbench = str(Path(sys.executable).parent / "workbench")
    cli = await asyncio.create_subprocess_exec(
        workbench, "submit", "--name", "from-cli", "--", "python", "-c", "print(1)",
        env=dict(os.environ), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    msg = await read(ws, timeout=60)
    while msg["type"] == "gpu":
        msg = await read(ws, timeout=60)
    received = time.time()
    _, err = await cli.communicate()
    assert cli.returncode == 0, err
    assert msg["type"] == "job" and msg["job"]["name"] == "from-cli", msg
    assert msg["id"] > hello["last_id"]
    latency = received - msg["job"]["created_at"]
    print(f"\nCLI submit -> WebSocket: {latency * 1000:.0f} ms")
    assert latency < 1.0, f"the CLI's job took {latency:.2f}s to reach the WebSocket"
    # Follow it to its end: the supervisor's writes arrive the same way.
    statuses = [msg["job"]["status"]]
    while statuses[-1] != "Succeeded":
        msg = await read(ws, timeout=60)
        if msg["type"] == "job":
            assert msg["job"]["name"] == "from-cli"
            statuses.append(msg["job"]["status"])
    assert "Running" in statuses or len(statuses) >= 2
    print(f"{len(statements)} store statements over the job's life")
    assert calls == [], calls  # no list, page or count of jobs
    listings = [s for s in statements if "ORDER BY created_at" in s or "COUNT(" in s]
    assert listings == []
    # The job rows read are the changed one and the active ones, never the 30 others.
    assert not [s for s in statements if "FROM jobs" in s and "old-" in s]
    ws.close()


async def test_resume_sends_exactly_the_missed_changes_once(jp_fetch, jp_ws_fetch, manager):
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1"})
    assert (await read(ws))["type"] == "hello"
    await submit(jp_fetch, {"name": "seen", "command": py("print('x')")})
    await wait_done(jp_fetch, "seen")
    seen = [await read(ws)]
    while seen[-1]["type"] != "job" or seen[-1]["job"]["status"] != "Succeeded":
        seen.append(await read(ws))
    seen += await job_messages(ws, 0)  # any write after the end (none expected) counts too
    seen = [m for m in seen if m["type"] == "job"]
    assert all(m["job"]["name"] == "seen" for m in seen)
    ids = [m["id"] for m in seen]
    assert ids == sorted(set(ids))  # strictly increasing
    last = ids[-1]
    ws.close()
    # While away: three changes (a new job, a change to it, the first job deleted).
    manager.store.insert(_record("while-away"))
    manager.store.update("while-away", message="changed while away")
    manager.delete("seen")
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1", "since": str(last)})
    hello = await read(ws)
    assert hello["resumed"] is True and hello["last_id"] == last + 3
    missed = await job_messages(ws, 2)
    assert [(m["type"], m["id"]) for m in missed] == [("job", last + 2), ("job_deleted", last + 3)]
    assert missed[0]["job"]["name"] == "while-away"
    assert missed[0]["job"]["message"] == "changed while away"  # the latest record, once
    assert missed[1]["name"] == "seen"
    # Live changes go on from there, each once.
    manager.store.update("while-away", message="live")
    live = await job_messages(ws, 1)
    assert [(m["id"], m["job"]["message"]) for m in live] == [(last + 4, "live")]
    # A client already up to date gets the hello and nothing replayed.
    again = await jp_ws_fetch(*EVENTS, params={"since": str(last + 4)})
    hello = await read(again)
    assert hello["resumed"] is True and hello["protocol"] == 1
    assert await job_messages(again, 0) == []
    ws.close()
    again.close()


async def test_since_older_than_the_feed_keeps_gets_a_reset(jp_ws_fetch, manager):
    manager.store.insert(_record("busy"))
    with sqlite3.connect(manager.store.path) as db:
        db.executemany(
            "UPDATE jobs SET message=? WHERE name='busy'",
            [(str(i),) for i in range(CHANGES_KEPT + 1000)],
        )
    newest = manager.last_change_id()
    for since in ("0", str(newest + 10)):  # pruned, and never given by this store
        ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1", "since": since})
        hello = await read(ws)
        assert hello["resumed"] is False and hello["last_id"] == newest
        assert await job_messages(ws, 1) == [{"type": "reset", "last_id": newest}]
        ws.close()
    ws = await jp_ws_fetch(*EVENTS, params={"since": "0"})
    await read(ws)
    assert (await read(ws))["type"] == "reset"
    manager.store.update("busy", message="after the reset")
    live = await job_messages(ws, 1)
    assert [(m["id"], m["job"]["message"]) for m in live] == [(newest + 1, "after the reset")]
    ws.close()


async def test_an_unsupported_protocol_or_a_bad_since_closes_4400(jp_ws_fetch):
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "2"})
    assert await asyncio.wait_for(ws.read_message(), 20) is None
    assert ws.close_code == 4400
    assert "protocol 1" in ws.close_reason and "'2'" in ws.close_reason
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1", "since": "-3"})
    assert await asyncio.wait_for(ws.read_message(), 20) is None
    assert ws.close_code == 4400 and "since" in ws.close_reason
    ws = await jp_ws_fetch(*EVENTS)  # no protocol: v1
    hello = await read(ws)
    assert hello["type"] == "hello" and hello["protocol"] == 1
    ws.close()
