"""GPU figures from a DCGM exporter over real HTTP (the fake exporter on 127.0.0.1)."""

from __future__ import annotations

import pytest

from tests.fakes.dcgm_exporter import FakeDcgmExporter
from workbench.monitor import sampler as sampler_mod
from workbench.monitor._nvml import MonitorState
from workbench.monitor.alerts import AlertRules
from workbench.monitor.dcgm import DcgmExporterSampler, redact_url

A100 = {
    "DCGM_FI_DEV_GPU_UTIL": 87, "DCGM_FI_DEV_FB_USED": 40960, "DCGM_FI_DEV_FB_FREE": 40960,
    "DCGM_FI_DEV_GPU_TEMP": 61, "DCGM_FI_DEV_POWER_USAGE": 312.5, "DCGM_FI_DEV_SM_CLOCK": 1410,
    "DCGM_FI_DEV_XID_ERRORS": 0,
}  # fmt: skip


@pytest.fixture
def exporter():
    with FakeDcgmExporter() as e:
        e.add_gpu(0, **A100)
        e.add_gpu(1, **{**A100, "DCGM_FI_DEV_GPU_UTIL": 3, "DCGM_FI_DEV_GPU_TEMP": 40})
        yield e


def test_figures_arrive_in_sample_units(exporter):
    s = DcgmExporterSampler(exporter.url)
    samples = s.sample()
    assert s.state is MonitorState.OK and exporter.scrapes == 1
    g0 = samples[0]
    assert (g0.index, g0.uuid, g0.name) == (0, "GPU-fake-0000", "NVIDIA A100-SXM4-80GB")
    assert g0.utilization == 87 and g0.temperature == 61 and g0.power == 312.5
    assert g0.memory_used == 40 * 2**30 and g0.memory_total == 80 * 2**30
    assert g0.sm_clock == 1410 and g0.xid is None and g0.error is None
    assert samples[1].utilization == 3
    assert [x.index for x in s.history(1)] == [1]


def test_temperature_alert_xid_once_and_a_vanished_gpu(exporter):
    s = DcgmExporterSampler(
        exporter.url, rules=AlertRules(temperature_c=85, temperature_clear_c=80)
    )
    s.sample()
    exporter.set(0, DCGM_FI_DEV_GPU_TEMP=90, DCGM_FI_DEV_XID_ERRORS=79)
    hot = s.sample()
    assert hot[0].xid == 79
    assert {a.kind for a in s.alerts()} >= {"temperature"}
    assert s.sample()[0].xid is None  # the exporter repeats the last XID; reported once
    exporter.drop_gpu(1)
    samples = s.sample()
    assert samples[1].index == 1 and "no longer reported" in (samples[1].error or "")
    assert samples[0].error is None


def test_exporter_down_is_a_plain_state_not_a_crash(exporter):
    s = DcgmExporterSampler(exporter.url.replace("//", "//user:pw@"))
    s.sample()
    exporter.fail_with = 503
    samples = s.sample()
    assert s.state is MonitorState.ERROR
    assert "cannot read the DCGM exporter at http://***@127.0.0.1" in s.reason
    assert "pw" not in s.reason
    assert all(x.error for x in samples) and len(samples) == 2
    exporter.fail_with = None
    assert s.sample()[0].error is None and s.state is MonitorState.OK


def test_host_sampler_picks_the_source_from_the_environment(exporter, monkeypatch):
    monkeypatch.setenv("WORKBENCH_GPU_SOURCE", f"dcgm:{exporter.url}")
    s = sampler_mod.make_host_sampler()
    assert isinstance(s, DcgmExporterSampler)
    s.start()
    try:
        assert [x.utilization for x in s.latest()] == [87, 3]
    finally:
        s.stop()
    monkeypatch.setenv("WORKBENCH_GPU_SOURCE", "carrier-pigeon")
    bad = sampler_mod.make_host_sampler()
    assert bad.state is MonitorState.ERROR and "not understood" in bad.reason
    assert redact_url("http://a:b@h:1/m") == "http://***@h:1/m"
