"""The GPU monitor widget follows the sampler: gauges, chart, alerts, and the no-GPU message."""

from __future__ import annotations

from workbench.monitor.sampler import HostSampler
from workbench.widgets import show_gpus


def test_cards_follow_samples_and_alerts(install_fake, clock):
    install_fake({"gpus": [
        {"name": "NVIDIA A100 <80GB>", "memory_total": 100, "steps": [
            {"utilization": 20, "temperature": 60, "memory_used": 50},
            {"utilization": 80, "temperature": 90, "memory_used": 97}]},
        {"not_supported": ["power", "temperature"]},
    ]})  # fmt: skip
    sampler = HostSampler(clock=clock)
    sampler.sample()
    w = show_gpus(sampler)
    card = w.cards[0]
    assert card.util.value == 20 and card.memory.value == 50 and card.temperature.value == 60
    assert "A100 &lt;80GB&gt;" in card.title.value  # names are escaped
    assert 'data-alerts="0"' in w.alerts_html.value
    assert (
        "temp -" in w.cards[1].temperature.description and "power - /" in w.cards[1].details.value
    )
    clock.advance(1)
    sampler.sample()
    assert card.util.value == 80 and card.temperature.value == 90 and card.memory.value == 97
    assert 'data-points="2"' in card.chart.value
    assert 'data-alerts="2"' in w.alerts_html.value
    assert "GPU 0 is at 90 C" in w.alerts_html.value and "memory is 97% full" in w.alerts_html.value
    w.close()
    clock.advance(1)
    sampler.sample()  # no longer followed
    assert 'data-points="2"' in card.chart.value


def test_the_widget_says_why_there_is_nothing(install_fake, clock):
    install_fake({"init_error": "DriverNotLoaded"})
    sampler = HostSampler(clock=clock)
    sampler.start()
    w = show_gpus(sampler)
    assert "the NVIDIA driver is installed but not loaded" in w.header.value and w.cards == {}
    w.close()
