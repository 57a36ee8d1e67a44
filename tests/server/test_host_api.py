"""gpus, nodes, datasets, images, specs, Prometheus text and the event stream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from tornado.httpclient import HTTPClientError

from tests.server.conftest import body, py, submit, validate_response, wait_done


async def test_gpus_report_the_monitor_state_without_a_gpu(jp_fetch):
    from workbench.errors import MonitorUnavailableError
    from workbench.monitor import gpu_inventory

    with pytest.raises(MonitorUnavailableError) as info:
        gpu_inventory()  # this machine has no NVIDIA driver
    data = body(await jp_fetch("workbench", "api", "gpus"))
    assert data["gpus"] == [] and data["history"] == {} and data["alerts"] == []
    assert data["state"] != "running"
    assert data["reason"] and ("NVML" in data["reason"] or info.value.reason == data["reason"])
    no_history = body(
        await jp_fetch("workbench", "api", "gpus", params={"history": "false", "seconds": 5})
    )
    assert no_history["history"] == {}
    with pytest.raises(HTTPClientError) as bad:
        await jp_fetch("workbench", "api", "gpus", params={"seconds": "-3"})
    assert bad.value.code == 400 and json.loads(bad.value.response.body)["field"] == "seconds"


async def test_nodes_is_top(jp_fetch, manager):
    nodes = body(await jp_fetch("workbench", "api", "nodes"))["nodes"]
    # the same view as `workbench top -o json`
    assert nodes == json.loads(json.dumps([n.to_dict() for n in manager.nodes()]))
    assert nodes[0]["backend"] == "local" and nodes[0]["gpus"] == [] and nodes[0]["gpu_reason"]


async def test_catalogue(jp_fetch, manager):
    images = body(await jp_fetch("workbench", "api", "images"))["images"]
    assert {i["name"] for i in images} == set(manager.catalog.images)
    pytorch = next(i for i in images if i["name"] == "pytorch")
    assert pytorch["tags"] == manager.catalog.images["pytorch"].tags
    specs = body(await jp_fetch("workbench", "api", "specs"))["specs"]
    assert {s["name"]: s["price_per_hour"] for s in specs} == {
        n: s.price_per_hour for n, s in manager.catalog.specs.items()
    }


async def test_datasets_browse(jp_fetch, jp_root_dir):
    root = Path(jp_root_dir)  # local paths are browsable under the server's root only
    (root / "ds").mkdir()
    (root / "ds" / "train.csv").write_text("a,b\n1,2\n")
    (root / "ds" / "linked.csv").symlink_to(root / "ds" / "train.csv")  # listed as its target
    (root / "ds" / "broken").symlink_to(root / "nowhere")  # nothing to read: left out
    url = str(root / "ds")
    with pytest.raises(HTTPClientError) as missing:
        await jp_fetch("workbench", "api", "datasets")
    assert missing.value.code == 400 and json.loads(missing.value.response.body)["field"] == "url"
    listed = await jp_fetch("workbench", "api", "datasets", params={"url": url})
    validate_response(("workbench", "api", "datasets"), "GET", listed)  # no type "other"
    data = body(listed)
    assert [(e["name"].rsplit("/", 1)[-1], e["type"], e["size"]) for e in data["entries"]] == [
        ("linked.csv", "file", 8), ("train.csv", "file", 8)]  # fmt: skip
    with pytest.raises(HTTPClientError) as gone:
        await jp_fetch("workbench", "api", "datasets", params={"url": str(root / "nope")})
    assert gone.value.code == 400 and json.loads(gone.value.response.body)["field"] == "url"


async def test_prometheus_text(jp_fetch):
    await submit(jp_fetch, {"name": "counted", "command": py("print(1)")})
    await wait_done(jp_fetch, "counted")
    r = await jp_fetch("workbench", "metrics")
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    text = r.body.decode()
    assert 'workbench_jobs{status="Succeeded"} 1.0' in text
    assert 'workbench_jobs{status="Running"} 0.0' in text
    assert "# TYPE workbench_gpu_monitor_up gauge" in text
    assert "workbench_gpu_monitor_up{state=" in text and "} 0.0" in text


async def next_message(ws, kind: str, timeout: float = 20) -> dict:
    """The next message of type ``kind`` (skipping others)."""

    async def find() -> dict:
        while True:
            raw = await ws.read_message()
            assert raw is not None, "the event stream closed"
            msg = json.loads(raw)
            if msg["type"] == kind:
                return msg

    return await asyncio.wait_for(find(), timeout)


async def test_event_stream_pushes_job_changes_to_every_client(jp_fetch, jp_ws_fetch, jp_serverapp):
    first = await jp_ws_fetch("workbench", "api", "events")
    second = await jp_ws_fetch("workbench", "api", "events")
    hello = await next_message(first, "hello")
    assert hello["jobs"]["Running"] == 0 and hello["gpu"]["state"]
    await next_message(second, "hello")
    await submit(jp_fetch, {"name": "streamed", "command": py("print('x')")})
    seen: dict[str, set[str]] = {"first": set(), "second": set()}
    for label, ws in (("first", first), ("second", second)):
        while "Succeeded" not in seen[label]:
            msg = await next_message(ws, "job")
            if msg["job"]["name"] == "streamed":
                seen[label].add(msg["job"]["status"])
    hub = jp_serverapp.web_app.settings["workbench"].hub
    assert len(hub.clients) == 2
    # One watcher for all clients: ticks follow the poll interval (0.1 s), not the client count.
    before = hub.ticks
    await asyncio.sleep(1.0)
    assert hub.ticks - before <= 11
    r = await jp_fetch(
        "workbench", "api", "jobs", "streamed", method="DELETE", params={"purge": "1"}
    )
    assert r.code == 204
    gone = await next_message(first, "job_deleted")
    assert gone["name"] == "streamed"
    first.close()
    second.close()
