"""The GPU monitor widget (``workbench.widgets.show_gpus()``): a card per GPU with gauges, a
history chart and active alerts, updated live by the host sampler it subscribes to."""

from __future__ import annotations

import html
from typing import Any

import ipywidgets as widgets

from ..monitor.alerts import Alert
from ..monitor.sampler import GpuSample, HostSampler, MonitorState

CHART_W, CHART_H = 260, 60
CHART_SECONDS = 300.0


def _pct(value: float | None) -> float:
    return 0.0 if value is None else max(0.0, min(100.0, float(value)))


def _fmt(value: float | None, unit: str, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


def sparkline_svg(history: list[GpuSample]) -> str:
    """Utilisation (solid) and temperature (dashed, 0-100 C) over time as a small SVG."""
    if len(history) < 2:
        return f'<svg width="{CHART_W}" height="{CHART_H}" data-points="0"></svg>'
    t0, t1 = history[0].time, history[-1].time
    span = max(t1 - t0, 1e-9)

    def line(name: str) -> str:
        pts = [
            f"{(s.time - t0) / span * CHART_W:.1f},{CHART_H - _pct(getattr(s, name)) / 100 * CHART_H:.1f}"
            for s in history
            if getattr(s, name) is not None
        ]
        return " ".join(pts)

    return (
        f'<svg width="{CHART_W}" height="{CHART_H}" data-points="{len(history)}" '
        'style="border:1px solid var(--jp-border-color2, #ccc)">'
        f'<polyline fill="none" stroke="var(--jp-brand-color1, #1e88e5)" points="{line("utilization")}"/>'
        f'<polyline fill="none" stroke="#e53935" stroke-dasharray="3,2" points="{line("temperature")}"/>'
        "</svg>"
    )


class GpuCard(widgets.VBox):
    """One GPU: name, utilisation/memory/temperature gauges, power and clock, history."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.title = widgets.HTML()
        self.util = widgets.FloatProgress(min=0, max=100, description="util")
        self.memory = widgets.FloatProgress(min=0, max=100, description="memory")
        self.temperature = widgets.FloatProgress(min=0, max=100, description="temp")
        self.details = widgets.HTML()
        self.chart = widgets.HTML()
        super().__init__(
            [self.title, self.util, self.memory, self.temperature, self.details, self.chart],
            layout=widgets.Layout(border="1px solid var(--jp-border-color2, #ccc)", padding="4px",
                                  margin="2px", width="300px"),
        )  # fmt: skip

    def show(self, s: GpuSample, history: list[GpuSample]) -> None:
        """Render one sample (and the chart of recent ones)."""
        self.title.value = f"<b>GPU {s.index}</b> {html.escape(s.name)}"
        if s.error:
            self.details.value = f'<span style="color:#e53935">{html.escape(s.error)}</span>'
            return
        mem_pct = (
            100.0 * s.memory_used / s.memory_total
            if s.memory_used is not None and s.memory_total
            else None
        )
        self.util.value, self.util.description = (
            _pct(s.utilization),
            f"util {_fmt(s.utilization, '%')}",
        )
        self.memory.value, self.memory.description = _pct(mem_pct), f"mem {_fmt(mem_pct, '%')}"
        self.temperature.value = _pct(s.temperature)
        self.temperature.description = f"temp {_fmt(s.temperature, ' C')}"
        procs = "-" if s.processes is None else str(len(s.processes))
        self.details.value = (
            f"power {_fmt(s.power, ' W')} / {_fmt(s.power_limit, ' W')} &middot; "
            f"SM {_fmt(s.sm_clock, ' MHz')} &middot; processes {procs}"
        )
        self.chart.value = sparkline_svg(history)


class GpuMonitorWidget(widgets.VBox):
    """Cards for every GPU the sampler sees, plus its active alerts; live until closed."""

    def __init__(self, sampler: HostSampler, chart_seconds: float = CHART_SECONDS) -> None:
        self.sampler = sampler
        self.chart_seconds = chart_seconds
        self.header = widgets.HTML()
        self.alerts_html = widgets.HTML()
        self.cards: dict[int, GpuCard] = {}
        self.grid = widgets.HBox(layout=widgets.Layout(flex_flow="row wrap"))
        super().__init__([self.header, self.grid, self.alerts_html])
        self._unsubscribe = None
        if sampler.state is not MonitorState.OK:
            self.header.value = f"<b>GPU monitor</b>: {html.escape(sampler.reason)}"
            return
        self.refresh(sampler.latest())
        self._unsubscribe = sampler.subscribe(self.refresh)

    def refresh(self, samples: list[GpuSample]) -> None:
        """Show a round of samples (called from the sampler's thread)."""
        new = [s.index for s in samples if s.index not in self.cards]
        for i in new:
            self.cards[i] = GpuCard(i)
        if new:
            self.grid.children = [self.cards[i] for i in sorted(self.cards)]
        for s in samples:
            self.cards[s.index].show(s, self.sampler.history(s.index, self.chart_seconds))
        self.header.value = (
            f"<b>GPU monitor</b>: {len(samples)} GPU(s), sampled every {self.sampler.interval:g} s"
        )
        self.alerts_html.value = alerts_html(self.sampler.alerts())

    def close(self) -> None:
        """Stop listening to the sampler, then close the widgets."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for card in self.cards.values():
            card.close()
        super().close()


def alerts_html(active: list[Alert]) -> str:
    """Active alerts as a list ('no alerts' when none)."""
    if not active:
        return '<span data-alerts="0">no alerts</span>'
    colour = {"warning": "#fb8c00", "error": "#e53935"}
    items = "".join(
        f'<li style="color:{colour.get(a.level, "inherit")}" data-kind="{a.kind}">{html.escape(a.message)}</li>'
        for a in active
    )
    return f'<ul data-alerts="{len(active)}">{items}</ul>'


def show(sampler: HostSampler) -> Any:
    """The widget for ``sampler`` (what ``workbench.widgets.show_gpus()`` returns)."""
    return GpuMonitorWidget(sampler)
