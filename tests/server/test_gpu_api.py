"""The server's GPU surfaces with GPUs present: GET gpus, the event stream and Prometheus
gauges, fed by the monitor reading a DCGM exporter (the fake one, over real HTTP)."""

from __future__ import annotations

import asyncio

import pytest

from tests.fakes.dcgm_exporter import FakeDcgmExporter
from tests.server.conftest import body
from tests.server.test_host_api import next_message

A100 = {
    "DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_FB_USED": 40960, "DCGM_FI_DEV_FB_FREE": 40960,
    "DCGM_FI_DEV_GPU_TEMP": 61, "DCGM_FI_DEV_POWER_USAGE": 312.5, "DCGM_FI_DEV_SM_CLOCK": 1410,
}  # fmt: skip


@pytest.fixture
def exporter(monkeypatch: pytest.MonkeyPatch):
    """Two GPUs behind a DCGM exporter; the server's one host sampler reads them."""
    from workbench.monitor import sampler

    with FakeDcgmExporter() as e:
        e.add_gpu(0, **A100)
        e.add_gpu(1, **{**A100, "DCGM_FI_DEV_GPU_UTIL": 4})
        monkeypatch.setenv("WORKBENCH_GPU_SOURCE", f"dcgm:{e.url}")
        sampler.reset_host_sampler()
        yield e
        sampler.reset_host_sampler()


async def test_gpus_stream_and_gauges(exporter, jp_fetch, jp_ws_fetch):
    data = body(await jp_fetch("workbench", "api", "gpus"))
    assert data["state"] == "ok" and data["reason"] is None
    assert [(g["index"], g["utilization"]) for g in data["gpus"]] == [(0, 87.0), (1, 4.0)]
    assert data["gpus"][0]["memory_total"] == 80 * 2**30
    assert set(data["history"]) == {"0", "1"}

    ws = await jp_ws_fetch("workbench", "api", "events")
    hello = await next_message(ws, "hello")
    assert hello["gpu"]["state"] == "ok"
    exporter.set(0, DCGM_FI_DEV_GPU_TEMP=96, DCGM_FI_DEV_GPU_UTIL=99)

    async def hot() -> dict:
        while True:
            msg = await next_message(ws, "gpu")
            if msg["gpus"][0]["temperature"] == 96 and msg["alerts"]:
                return msg

    msg = await asyncio.wait_for(hot(), 30)
    assert msg["gpus"][0]["utilization"] == 99
    assert [a["kind"] for a in msg["alerts"]] == ["temperature"]
    ws.close()

    text = (await jp_fetch("workbench", "metrics")).body.decode()
    assert 'workbench_gpu_monitor_up{state="ok"} 1.0' in text
    util = [ln for ln in text.splitlines() if ln.startswith("workbench_gpu_utilization{")]
    assert len(util) == 2 and any(ln.endswith(" 99.0") for ln in util)
    assert "workbench_gpu_alerts 1.0" in text
