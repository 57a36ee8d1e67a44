"""HostSampler against the fake NVML: fields, NotSupported, vanishing GPUs, history, states."""

from __future__ import annotations

import time

import pytest

from workbench.monitor import MonitorState, get_host_sampler
from workbench.monitor.sampler import GpuSample, HostSampler


def test_fields_are_read_and_converted(install_fake, clock):
    install_fake({"gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": "GPU-aaaa", "memory_total": 80 * 2**30,
                            "power_limit": 700, "processes": [{"pid": 4242, "memory": 3 * 2**30}],
                            "steps": [{"utilization": 87, "memory_used": 10 * 2**30, "temperature": 66,
                                       "power": 412.5, "sm_clock": 1980, "ecc": 0}]}]})  # fmt: skip
    s = HostSampler(clock=clock)
    [sample] = s.sample()
    assert s.state is MonitorState.OK and s.reason == ""
    assert (sample.index, sample.uuid, sample.name) == (0, "GPU-aaaa", "NVIDIA H100 80GB HBM3")
    assert sample.utilization == 87.0 and sample.temperature == 66.0 and sample.sm_clock == 1980
    assert sample.memory_used == 10 * 2**30 and sample.memory_total == 80 * 2**30
    assert sample.power == pytest.approx(412.5) and sample.power_limit == pytest.approx(700.0)
    assert sample.processes == [{"pid": 4242, "memory": 3 * 2**30}]
    assert sample.error is None and sample.xid is None
    assert GpuSample.from_dict(sample.to_dict()) == sample


def test_not_supported_fields_become_none_and_are_not_asked_again(install_fake, clock):
    fake = install_fake({"gpus": [{"not_supported": ["power", "power_limit", "processes", "ecc", "xid"],
                                   "steps": [{"utilization": 10, "temperature": 50}]}]})  # fmt: skip
    s = HostSampler(clock=clock, slow_interval=1)
    for _ in range(5):
        [sample] = s.sample()
        clock.advance(1)
    assert sample.power is None and sample.power_limit is None and sample.processes is None
    assert sample.ecc_errors is None and sample.xid is None
    assert sample.utilization == 10.0 and sample.temperature == 50.0
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 1
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 5


def test_process_lists_are_read_only_every_slow_interval(install_fake, clock):
    fake = install_fake({"gpus": [{"processes": [{"pid": 1, "memory": 5}]}] * 2})
    s = HostSampler(clock=clock, interval=1, slow_interval=10)
    for _ in range(30):
        samples = s.sample()
        clock.advance(1)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 60
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 6  # 3 rounds x 2 GPUs
    assert all(x.processes == [{"pid": 1, "memory": 5}] for x in samples)  # carried between reads


def test_a_gpu_that_vanishes_mid_run_is_reported_not_fatal(install_fake, clock):
    install_fake(
        {"gpus": [{"steps": [{"utilization": 50}]}, {"lost_at": 3, "steps": [{"utilization": 70}]}]}
    )
    s = HostSampler(clock=clock)
    seen = []
    s.subscribe_alerts(seen.append)
    for _ in range(6):
        samples = s.sample()
        clock.advance(1)
    ok, lost = samples
    assert ok.utilization == 50.0 and ok.error is None
    assert lost.error and "fell off the bus" in lost.error and lost.utilization is None
    assert [a.kind for a in seen] == ["gpu_lost"] and seen[0].gpu == 1 and seen[0].level == "error"
    assert [(a.kind, a.gpu) for a in s.alerts()] == [("gpu_lost", 1)]
    assert s.state is MonitorState.OK


def test_the_sampling_thread_survives_a_lost_gpu(install_fake):
    install_fake({"gpus": [{"steps": [{"utilization": 50}]}, {"lost_at": 0.3}]}, use_clock=False)
    s = HostSampler(interval=0.05, slow_interval=0.2)
    s.start()
    try:
        deadline = time.time() + 10
        while time.time() < deadline and not (s.latest() and s.latest()[1].error):
            time.sleep(0.02)
        assert s.latest()[1].error
        before = s.latest()[0].time
        time.sleep(0.3)
        assert s.running and s.latest()[0].time > before  # still sampling the healthy GPU
    finally:
        s.stop()
    assert not s.running


def test_a_missing_index_is_reported(install_fake, clock):
    install_fake({"gpus": [{}]})
    s = HostSampler(clock=clock, indices=[0, 3])
    _, missing = s.sample()
    assert missing.index == 3 and "not present" in (missing.error or "")


def test_history_is_bounded_fine_then_coarse(install_fake, clock):
    install_fake({"gpus": [{"steps": [{"utilization": u % 100} for u in range(1000)]}]})
    s = HostSampler(
        clock=clock, interval=1, history_seconds=60, coarse_seconds=10, coarse_history_seconds=300
    )
    for _ in range(1000):
        s.sample()
        clock.advance(1)
    hist = s.history(0)
    fine = [h for h in hist if h.time >= hist[-1].time - 59]
    assert len(fine) == 60
    assert len(hist) - len(fine) <= 30  # 300 s of 10 s buckets
    times = [h.time for h in hist]
    assert times == sorted(times) and len(set(times)) == len(times)
    assert len(s.history(0, seconds=30)) == 31
    # coarse points summarise their bucket: mean utilisation of ten 1 s samples
    coarse = hist[0]
    k0 = coarse.time - 1_000_000  # the scenario's step index at the bucket start
    assert k0 % 10 == 0
    assert coarse.utilization == pytest.approx(k0 % 100 + 4.5)


def test_subscribers_get_every_sample_and_a_broken_one_does_not_stop_others(install_fake, clock):
    install_fake({"gpus": [{}, {}]})
    s = HostSampler(clock=clock)
    got: list[int] = []

    def broken(samples):
        raise RuntimeError("viewer bug")

    s.subscribe(broken)
    unsubscribe = s.subscribe(lambda samples: got.append(len(samples)))
    s.sample()
    s.sample()
    unsubscribe()
    s.sample()
    assert got == [2, 2]


@pytest.mark.parametrize(
    ("scenario", "state", "words"),
    [
        (
            {"init_error": "LibraryNotFound"},
            MonitorState.NO_LIBRARY,
            "no NVIDIA driver on this host",
        ),
        (
            {"init_error": "DriverNotLoaded"},
            MonitorState.NO_DRIVER,
            "driver is installed but not loaded",
        ),
        ({"init_error": "NoPermission"}, MonitorState.NO_PERMISSION, "no permission"),
        ({"gpus": []}, MonitorState.NO_GPU, "reports no GPUs"),
    ],
)
def test_why_monitoring_is_off_is_said_plainly(install_fake, clock, scenario, state, words):
    install_fake(scenario)
    s = HostSampler(clock=clock)
    s.start()
    assert s.state is state and words in s.reason
    assert s.latest() == [] and s.sample() == [] and not s.running
    assert s.status() == {"state": state.value, "reason": s.reason}


def test_monitoring_can_be_switched_off(install_fake, clock, monkeypatch):
    fake = install_fake({"gpus": [{}]})
    monkeypatch.setenv("WORKBENCH_GPU_MONITOR", "0")
    s = HostSampler(clock=clock)
    s.start()
    assert s.state is MonitorState.DISABLED and "switched off" in s.reason
    assert fake.calls["nvmlInit"] == 0


def test_host_sampler_is_one_per_process_and_started(install_fake):
    fake = install_fake({"gpus": [{}]}, use_clock=False)
    a = get_host_sampler()
    b = get_host_sampler()
    assert a is b and a.running and len(a.latest()) == 1
    assert fake.calls["nvmlInit"] == 1
