"""Live metrics over the event stream (workbench/server/_livemetrics.py): subscribe to a
running job's metrics, get frames as it logs, none after unsubscribe or for a job nobody
watches, resume with since= without duplicates, bounded frames, error frames for bad input."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from tests.server.conftest import py, submit, wait_done
from tests.server.test_events_protocol import EVENTS, check
from workbench.manager import JobManager
from workbench.monitor.metrics import READ_CHUNK, parse_cursor
from workbench.spec import JobRecord, JobStatus

# Logs one loss per file go-N the test touches in the folder it is given; ends on "stop".
STEPPER = """\
import os, sys, time
from workbench import run
d, step = sys.argv[1], 0
while not os.path.exists(os.path.join(d, "stop")):
    if os.path.exists(os.path.join(d, f"go-{step}")):
        run.log(step=step, loss=1.0 / (step + 1))
        run.flush()
        step += 1
    else:
        time.sleep(0.02)
"""


async def frames(ws: Any, kind: str, timeout: float = 30) -> dict[str, Any]:
    """The next frame of ``kind`` (others skipped), or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no {kind} frame within {timeout}s"
        try:
            raw = await asyncio.wait_for(ws.read_message(), left)
        except asyncio.TimeoutError:
            raise AssertionError(f"no {kind} frame within {timeout}s") from None
        assert raw is not None, f"the event stream closed: {ws.close_code} {ws.close_reason}"
        msg = check(json.loads(raw))
        if msg["type"] == kind:
            return msg


async def quiet(ws: Any, kind: str, seconds: float) -> list[dict[str, Any]]:
    """Every ``kind`` frame that arrives within ``seconds`` (a test expects none)."""
    out = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            raw = await asyncio.wait_for(ws.read_message(), left)
        except asyncio.TimeoutError:
            break
        assert raw is not None
        msg = check(json.loads(raw))
        if msg["type"] == kind:
            out.append(msg)
    return out


def offsets(cursor: str) -> int:
    """How far a cursor has read, all files together."""
    return sum(parse_cursor(cursor).values())


async def until_logged(manager: JobManager, name: str, steps: int) -> None:
    """Wait until ``name`` has ``steps`` scalar records on disk (read here, not over the wire)."""
    deadline = time.monotonic() + 30
    while len(manager.metrics(name)["scalars"]) < steps:
        assert time.monotonic() < deadline, f"{name} never logged {steps} steps"
        await asyncio.sleep(0.05)


async def test_a_subscribed_running_job_streams_its_losses_and_resumes_without_duplicates(
    jp_fetch, jp_ws_fetch, jp_serverapp, manager, tmp_path, monkeypatch
):
    dirs = {name: tmp_path / name for name in ("watched", "unwatched")}
    for name, d in dirs.items():
        d.mkdir()
        await submit(jp_fetch, {"name": name, "command": [*py(STEPPER), str(d)]})
    reads: list[str] = []
    real = JobManager.metrics

    def counted(self, name, *a, **k):  # type: ignore[no-untyped-def]
        reads.append(name)
        return real(self, name, *a, **k)

    monkeypatch.setattr(JobManager, "metrics", counted)
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1"})
    await frames(ws, "hello")
    await ws.write_message(json.dumps({"type": "subscribe", "metrics": "watched"}))
    got: list[dict[str, Any]] = []
    cursors = []
    for step in range(3):
        for d in dirs.values():
            (d / f"go-{step}").touch()
        while len(got) <= step:
            msg = await frames(ws, "metrics")
            assert msg["name"] == "watched", msg  # never the job nobody subscribed to
            got += msg["scalars"]
            cursors.append(offsets(msg["cursor"]))
    assert [r["step"] for r in got] == [0, 1, 2]
    assert [r["loss"] for r in got] == [1.0, 0.5, 1.0 / 3]
    assert cursors == sorted(set(cursors))  # strictly increasing
    assert "unwatched" not in reads  # no reads for a job nobody watches
    last = msg["cursor"]

    # Unsubscribed: the job logs on, no frames come.
    await ws.write_message(json.dumps({"type": "unsubscribe", "metrics": "watched"}))
    await asyncio.sleep(0.3)  # let the server read the frame before the job logs again
    (dirs["watched"] / "go-3").touch()
    await until_logged(manager, "watched", 4)
    assert await quiet(ws, "metrics", 1.0) == []
    ws.close()

    # A new connection resumes from the last cursor: step 3 only, then live steps.
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1"})
    await frames(ws, "hello")
    await ws.write_message(json.dumps({"type": "subscribe", "metrics": "watched", "since": last}))
    msg = await frames(ws, "metrics")
    assert [r["step"] for r in msg["scalars"]] == [3]
    assert offsets(msg["cursor"]) > offsets(last)
    (dirs["watched"] / "go-4").touch()
    msg = await frames(ws, "metrics")
    assert [r["step"] for r in msg["scalars"]] == [4]
    # The job ends: its subscription stops reading once nothing more is left.
    (dirs["watched"] / "stop").touch()
    (dirs["unwatched"] / "stop").touch()
    await wait_done(jp_fetch, "watched")
    hub = jp_serverapp.web_app.settings["workbench"].hub
    (client,) = hub.clients
    deadline = time.monotonic() + 30
    while not client.subscriptions["watched"].done:  # drained: nothing left to send
        assert time.monotonic() < deadline, "the finished job's subscription never drained"
        await asyncio.sleep(0.05)
    before = len(reads)
    await asyncio.sleep(0.75)  # three ticks
    assert len(reads) == before, "a finished, fully sent job is still read every tick"
    ws.close()


async def test_a_large_backlog_goes_out_in_bounded_frames_each_record_once(
    jp_ws_fetch, manager, tmp_path
):
    job_dir = tmp_path / "big"
    (job_dir / "metrics").mkdir(parents=True)
    pad = "x" * 80
    lines = [
        json.dumps({"time": 1000.0 + i, "rank": 0, "step": i, "total": None, "pad": pad})
        for i in range(20_000)
    ]
    (job_dir / "metrics" / "scalars-rank0.jsonl").write_text("\n".join(lines) + "\n")
    size = (job_dir / "metrics" / "scalars-rank0.jsonl").stat().st_size
    assert READ_CHUNK < size < 3.5 * READ_CHUNK  # several chunks, not skipped ahead
    record = JobRecord(
        name="big", status=JobStatus.SUCCEEDED, backend="local", spec={"name": "big"},
        image="img", runtime="process", created_at=time.time(), job_dir=str(job_dir),
    )  # fmt: skip
    manager.store.insert(record)
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1"})
    await frames(ws, "hello")
    await ws.write_message(json.dumps({"type": "subscribe", "metrics": "big", "since": ""}))
    steps: list[int] = []
    sizes = []
    while len(steps) < len(lines):
        raw = await asyncio.wait_for(ws.read_message(), 30)
        assert raw is not None
        msg = json.loads(raw)
        if msg["type"] == "metrics":
            sizes.append(len(raw))
            steps += [r["step"] for r in msg["scalars"]]
    assert steps == list(range(len(lines)))  # all of them, in order, each once
    assert len(sizes) >= 2 and max(sizes) < 1.5 * READ_CHUNK, sizes
    assert await quiet(ws, "metrics", 0.6) == []  # finished and sent: nothing more
    ws.close()


async def test_bad_client_frames_get_an_error_frame_naming_the_field(
    jp_fetch, jp_ws_fetch, manager
):
    code = (
        "import time\nfrom workbench import run\n"
        "for i in range(3): run.log(step=i, loss=i); time.sleep(0.05)  # one record a slot\n"
        "run.flush()"
    )
    await submit(jp_fetch, {"name": "done", "command": py(code)})
    await wait_done(jp_fetch, "done")
    ws = await jp_ws_fetch(*EVENTS, params={"protocol": "1"})
    await frames(ws, "hello")
    bad = [
        ("not json", "frame"),
        ("[1, 2]", "frame"),
        (json.dumps({"type": "listen", "metrics": "done"}), "type"),
        (json.dumps({"type": "subscribe"}), "metrics"),
        (json.dumps({"type": "subscribe", "metrics": 7}), "metrics"),
        (json.dumps({"type": "subscribe", "metrics": "no-such-job"}), "metrics"),
        (json.dumps({"type": "subscribe", "metrics": "done", "since": 5}), "since"),
        (json.dumps({"type": "subscribe", "metrics": "done", "since": "garbage"}), "since"),
    ]
    for frame, field in bad:
        await ws.write_message(frame)
        msg = await frames(ws, "error", timeout=10)
        assert msg["field"] == field, (frame, msg)
        assert msg["error"] and "Traceback" not in msg["error"]
    # Still open and serving: a finished job's records come once, then nothing.
    await ws.write_message(json.dumps({"type": "subscribe", "metrics": "done"}))
    msg = await frames(ws, "metrics")
    assert [r["step"] for r in msg["scalars"]] == [0, 1, 2]
    assert await quiet(ws, "metrics", 0.6) == []
    ws.close()
