"""Alert rules through the sampler: fire once, clear with hysteresis, no flapping."""

from __future__ import annotations

import pytest

from workbench.errors import SpecError
from workbench.monitor import AlertRules
from workbench.monitor.sampler import HostSampler


def run(install_fake, clock, gpu, n=None, **sampler_kw):
    install_fake({"gpus": [gpu]})
    s = HostSampler(clock=clock, **sampler_kw)
    changes = []
    s.subscribe_alerts(lambda a: changes.append((a.kind, "fired" if a.cleared is None else "cleared",
                                                round(clock() - 1_000_000))))  # fmt: skip
    for _ in range(n or len(gpu["steps"])):
        s.sample()
        clock.advance(1)
    return s, changes


def test_rising_temperature_fires_once_and_clears_with_hysteresis(install_fake, clock):
    temps = [70, 78, 84, 85, 87, 84, 86, 84, 85, 82, 81, 80, 79, 84, 84, 70]
    #        0   1   2   3!  4   5   6   7   8   9   10  11c 12  13  14  15
    s, changes = run(install_fake, clock, {"steps": [{"temperature": t} for t in temps]})
    assert changes == [("temperature", "fired", 3), ("temperature", "cleared", 11)]
    assert s.alerts() == []


def test_a_second_episode_fires_again(install_fake, clock):
    temps = [86, 86, 79, 86, 86]
    _, changes = run(install_fake, clock, {"steps": [{"temperature": t} for t in temps]})
    assert changes == [
        ("temperature", "fired", 0),
        ("temperature", "cleared", 2),
        ("temperature", "fired", 3),
    ]


def test_memory_rule_uses_percent_of_total(install_fake, clock):
    total = 100 * 2**30
    used = [50, 94, 95, 99, 93, 91, 90, 96]
    s, changes = run(install_fake, clock, {"memory_total": total,
                                           "steps": [{"memory_used": u * 2**30} for u in used]})  # fmt: skip
    assert changes == [("memory", "fired", 2), ("memory", "cleared", 6), ("memory", "fired", 7)]
    [active] = s.alerts()
    assert active.kind == "memory" and active.value == 96.0 and active.threshold == 95.0
    assert active.to_dict()["message"].startswith("GPU 0 memory is 96% full")


def test_idle_gpu_while_a_job_runs_with_a_short_window(install_fake, clock):
    rules = AlertRules(idle_seconds=30)
    steps = [{"utilization": 2}] * 40 + [{"utilization": 7}] * 5 + [{"utilization": 60}] * 3
    _, changes = run(install_fake, clock, {"steps": steps}, rules=rules, watch_idle=True)
    # idle from t=0: fires at t=30; 7 % is above idle but below the clear line; 60 % clears
    assert changes == [("idle", "fired", 30), ("idle", "cleared", 45)]


def test_busy_blips_restart_the_idle_window(install_fake, clock):
    steps = ([{"utilization": 1}] * 20 + [{"utilization": 50}]) * 3
    _, changes = run(
        install_fake, clock, {"steps": steps}, rules=AlertRules(idle_seconds=30), watch_idle=True
    )
    assert changes == []


def test_the_host_sampler_does_not_judge_idleness(install_fake, clock):
    _, changes = run(
        install_fake, clock, {"steps": [{"utilization": 0}]}, n=20, rules=AlertRules(idle_seconds=5)
    )
    assert changes == []


def test_xid_and_ecc_errors_raise_error_alerts(install_fake, clock):
    steps = [{"ecc": 0}] * 4 + [{"ecc": 2}] * 4
    gpu = {"steps": steps, "xid": [{"at": 2, "code": 79}]}
    s, changes = run(
        install_fake, clock, gpu, slow_interval=1, rules=AlertRules(event_clear_seconds=3)
    )
    assert ("xid", "fired", 2) in changes and ("xid", "cleared", 5) in changes
    assert ("ecc", "fired", 4) in changes
    [ecc] = s.alerts()
    assert ecc.level == "error" and "2 new uncorrected ECC" in ecc.message


def test_thresholds_are_configurable_from_the_environment(monkeypatch):
    monkeypatch.setenv(
        "WORKBENCH_GPU_ALERTS", "temperature_c=80, temperature_clear_c=75,idle_seconds=300,xid=off"
    )
    rules = AlertRules.from_env()
    assert (rules.temperature_c, rules.temperature_clear_c, rules.idle_seconds, rules.xid) == (
        80,
        75,
        300,
        False,
    )


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ("temprature_c=80", "alerts.temprature_c"),
        ("temperature_c=hot", "alerts.temperature_c"),
        ("temperature_c", "WORKBENCH_GPU_ALERTS"),
        ("temperature_c=70", "alerts.temperature_clear_c"),
    ],
)
def test_bad_thresholds_name_the_field(monkeypatch, spec, field):
    monkeypatch.setenv("WORKBENCH_GPU_ALERTS", spec)
    with pytest.raises(SpecError) as e:
        AlertRules.from_env()
    assert e.value.field == field
