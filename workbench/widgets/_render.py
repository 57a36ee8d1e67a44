"""HTML and SVG for the job widget: plain strings, so ipywidgets.HTML shows them with no
frontend extension, and tests can read them from the widget's model state.

Colours are JupyterLab's CSS variables (with a fallback), so light and dark themes both
read well. The output is well-formed XML (no named entities), which keeps it easy to test.
"""

from __future__ import annotations

import html
import math
import time
from typing import Any

from ..spec import JobRecord
from ..tables import format_duration
from ._feed import Progress, Series

STATUS_COLOURS = {
    "Pending": "#757575",
    "Running": "#1e88e5",
    "Cancelling": "#fb8c00",  # the stop is under way
    "Succeeded": "#2e7d32",
    "Failed": "#e53935",
    "Cancelled": "#ef6c00",
    "Stopped": "#ef6c00",
}
LEVEL_COLOURS = {"info": "inherit", "warning": "#ef6c00", "error": "#e53935"}
EVENTS_SHOWN = 6
CHARTS_SHOWN = 6
# Chart geometry (px): the plot sits inside margins that hold the axes' tick labels.
CHART_W, CHART_H = 300, 150
LEFT, RIGHT, TOP, BOTTOM = 46, 12, 8, 34
X_TICKS, Y_TICKS = 5, 4

# ipywidgets gives HTML content the line height of a widget row (28px): text blocks reset it.
BLOCK = "line-height:1.45"
MUTED = "color:var(--jp-ui-font-color2,#616161)"
BORDER = "var(--jp-border-color2,#e0e0e0)"
CELL = "padding:2px 16px 2px 0;text-align:left;white-space:nowrap"
SEP = " \u00b7 "  # a middle dot between header facts


def badge(status: str) -> str:
    """A status as a coloured pill (text, not a control)."""
    colour = STATUS_COLOURS.get(status, "#757575")
    return (
        f'<span data-status="{status}" style="display:inline-block;color:#fff;'
        f"background:{colour};padding:0 8px;border-radius:10px;font-size:85%;"
        f'font-weight:600;line-height:1.6">{status}</span>'
    )


def status_html(
    record: JobRecord, progress: Progress, gpus: list[dict[str, Any]], gpu_note: str | None
) -> str:
    """Header (status, elapsed, cost, retries), per-rank table, ETA, GPUs and recent events."""
    now = time.time()
    s = record.status.value
    retries = int(record.spec.get("max_retries", 0))
    elapsed, cost = record.elapsed(now), record.cost(now)
    facts = SEP.join(
        [
            f'elapsed <span data-elapsed="{elapsed:.0f}">{format_duration(elapsed)}</span>',
            f'cost <span data-cost="{cost:.6f}">${cost:.4f}</span>'
            f" (${record.price_per_hour:.2f}/h \u00d7 {record.workers} worker(s))",
            f"attempt {record.attempt} of {retries + 1}",
        ]
    )
    head = (
        f'<span style="font-size:115%;font-weight:600">{html.escape(record.name)}</span> '
        f'{badge(s)} <span style="{MUTED}">{facts}</span>'
    )
    parts = [f"<div>{head}</div>"]
    if record.message:
        parts.append(f'<div style="{MUTED}"><i>{html.escape(record.message)}</i></div>')
    if progress.step is not None:
        eta = progress.eta()
        total = f"/{progress.total}" if progress.total else ""
        eta_text = (
            "" if eta is None or record.status.terminal else f"{SEP}ETA {format_duration(eta)}"
        )
        parts.append(
            f'<div data-step="{progress.step}">step {progress.step}{total}{eta_text}</div>'
        )
    parts.append(rank_table(record))
    parts.append(f'<div style="{MUTED}">{gpu_html(gpus, gpu_note)}</div>')
    events = record.events[-EVENTS_SHOWN:]
    if events:
        items = "".join(
            f'<li style="color:{LEVEL_COLOURS.get(e.level, "inherit")}" '
            f'data-event="{html.escape(e.reason)}">'
            f'<span style="{MUTED}">{time.strftime("%H:%M:%S", time.localtime(e.time))}</span> '
            f"<b>{html.escape(e.reason)}</b> {html.escape(e.message)}</li>"
            for e in events
        )
        parts.append(f'<ul style="margin:4px 0;padding-left:18px;font-size:90%">{items}</ul>')
    return f'<div style="{BLOCK}">{"".join(parts)}</div>'


def rank_table(record: JobRecord) -> str:
    """One row per rank; padded cells so adjacent values never read as one."""
    if not record.ranks:
        return ""
    head = "".join(
        f'<th style="{CELL};border-bottom:1px solid {BORDER};font-weight:600">{h}</th>'
        for h in ("rank", "state", "exit", "pid", "GPU devices")
    )
    rows = []
    for r in record.ranks:
        state = r.state.value
        colour = STATUS_COLOURS.get(state, "inherit")
        cells = (
            str(r.rank),
            f'<span style="color:{colour};font-weight:600">{state}</span>',
            "" if r.exit_code is None else str(r.exit_code),
            str(r.pid or ""),
            html.escape(r.gpu_devices or "-"),
        )
        rows.append(
            f'<tr data-rank="{r.rank}">'
            + "".join(f'<td style="{CELL}">{c}</td>' for c in cells)
            + "</tr>"
        )
    return (
        '<table style="border-collapse:collapse;margin:6px 0;font-size:90%">'
        f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def gpu_html(gpus: list[dict[str, Any]], note: str | None) -> str:
    """The latest sample of each of the job's GPUs, or why there is none."""
    if not gpus:
        return f'GPUs: <span data-gpu-note="1">{html.escape(note or "no samples yet")}</span>'
    cells = []
    for g in gpus:
        label = f"rank {g['rank']} " if g.get("rank") is not None else ""
        label += f"GPU {g.get('index', '?')}"
        bits = []
        if isinstance(g.get("utilization"), (int, float)):
            bits.append(f"{g['utilization']:.0f}% util")
        used, total = g.get("memory_used"), g.get("memory_total")
        if isinstance(used, (int, float)) and isinstance(total, (int, float)) and total:
            bits.append(f"{used / 2**30:.1f}/{total / 2**30:.0f} GiB")
        if isinstance(g.get("temperature"), (int, float)):
            bits.append(f"{g['temperature']:.0f}\u00b0C")
        if isinstance(g.get("power"), (int, float)):
            bits.append(f"{g['power']:.0f} W")
        if g.get("error"):
            bits.append(f'<span style="color:#e53935">{html.escape(str(g["error"]))}</span>')
        cells.append(f"{html.escape(label)}: {', '.join(bits) or 'n/a'}")
    return "GPUs: " + SEP.join(cells)


PREFERRED = ("loss", "acc", "lr")  # drawn by default when a job logs them


def default_series(names: list[str]) -> list[str]:
    """The series drawn until the user picks: loss/acc/lr (any rank), else the first ones."""
    base = [n for n in names if n.split("[", 1)[0] in PREFERRED]
    return (base or names)[:CHARTS_SHOWN]


def chart_svg(series: dict[str, Series], chosen: list[str] | None = None) -> str:
    """One small line chart per chosen scalar (own scale each, step axis below), as inline
    SVG, and a note saying how many series are not drawn."""
    if not series:
        return f'<div style="{MUTED};{BLOCK}">no scalars yet (report them with workbench.run.log)</div>'
    names = [
        n for n in (chosen if chosen is not None else default_series(list(series))) if n in series
    ]
    panels = [_panel(series[n]) for n in names]
    hidden = len(series) - len(names)
    note = (
        f'<div data-hidden-series="{hidden}" style="{MUTED};width:100%">{hidden} more '
        f"series not drawn: pick them in the series list</div>"
        if hidden
        else ""
    )
    return (
        f'<div style="display:flex;flex-wrap:wrap;gap:10px;{BLOCK}">{"".join(panels)}{note}</div>'
    )


def nice_ticks(lo: float, hi: float, count: int) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) inside [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi < lo:
        return []
    if hi == lo:
        return [lo]
    step = _nice_step((hi - lo) / count)
    first = math.ceil(lo / step - 1e-9)
    ticks = []
    k = first
    while k * step <= hi + step * 1e-9:
        ticks.append(round(k * step, 12))
        k += 1
    return ticks


def _nice_step(raw: float) -> float:
    """The 1, 2, 5 or 10 times a power of ten nearest ``raw`` (d3's thresholds)."""
    power = 10 ** math.floor(math.log10(raw))
    ratio = raw / power
    for limit, m in ((math.sqrt(2), 1), (math.sqrt(10), 2), (math.sqrt(50), 5)):
        if ratio < limit:
            return m * power
    return 10 * power


def tick_label(v: float) -> str:
    """A short axis label: 0.25, 15k, 123.5k, 2M, 3e-05."""
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e6:
        return f"{v / 1e6:.4g}M"
    if a >= 1e4:
        return f"{v / 1e3:.4g}k"  # at most six characters: fits the left margin
    if a < 1e-3:
        return f"{v:.0e}"
    return f"{v:.4g}"


def _value_domain(lo: float, hi: float) -> tuple[float, float, list[float]]:
    """The y range widened to round ticks (a flat line sits mid-chart)."""
    if hi == lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice_step((hi - lo) / Y_TICKS)
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    ticks = [round(k * step, 12) for k in range(first, last + 1)]  # a tick at each end
    return ticks[0], ticks[-1], ticks


def _panel(s: Series) -> str:
    finite = [(x, y) for x, y in zip(s.steps, s.values, strict=True) if math.isfinite(y)]
    last = s.values[-1] if s.values else float("nan")
    step = s.steps[-1] if s.steps else 0
    name = html.escape(s.name)
    title = (
        f'<div data-chart-title="1" style="font-size:12px;overflow-wrap:anywhere">'
        f'<b>{name}</b> {last:.4g} <span style="{MUTED}">at step {step:g}</span></div>'
    )
    w, h = CHART_W - LEFT - RIGHT, CHART_H - TOP - BOTTOM
    text = 'font-size="10" style="fill:var(--jp-ui-font-color2,#616161)"'
    grid = f'style="stroke:{BORDER}" stroke-width="1"'
    body: list[str] = []
    points = ""
    if finite:
        xs, ys = [p[0] for p in finite], [p[1] for p in finite]
        x0, x1 = min(xs), max(xs)
        if x1 == x0:
            x0, x1 = x0 - 1, x1 + 1
        lo, hi, y_ticks = _value_domain(min(ys), max(ys))

        def px(x: float) -> float:
            return LEFT + (x - x0) / (x1 - x0) * w

        def py(y: float) -> float:
            return TOP + h - (y - lo) / (hi - lo) * h

        y_axis = []
        for t in y_ticks:
            y = py(t)
            y_axis.append(
                f'<line x1="{LEFT}" x2="{LEFT + w}" y1="{y:.1f}" y2="{y:.1f}" {grid}/>'
                f'<text data-tick="{t!r}" x="{LEFT - 4}" y="{y + 3:.1f}" text-anchor="end" '
                f"{text}>{tick_label(t)}</text>"
            )
        body.append(f'<g data-axis="value">{"".join(y_axis)}</g>')
        x_ticks = [t for t in nice_ticks(x0, x1, X_TICKS) if t == int(t)] or [x0]
        x_axis = [f'<line x1="{LEFT}" x2="{LEFT + w}" y1="{TOP + h}" y2="{TOP + h}" {grid}/>']
        for t in x_ticks:
            x = px(t)
            x_axis.append(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + h}" y2="{TOP + h + 4}" {grid}/>'
                f'<text data-tick="{t!r}" x="{x:.1f}" y="{TOP + h + 15}" text-anchor="middle" '
                f"{text}>{tick_label(t)}</text>"
            )
        x_axis.append(
            f'<text data-axis-label="step" x="{LEFT + w / 2:.1f}" y="{CHART_H - 3}" '
            f'text-anchor="middle" {text}>step</text>'
        )
        body.append(f'<g data-axis="step">{"".join(x_axis)}</g>')
        points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in finite)
        lx, ly = px(finite[-1][0]), py(finite[-1][1])
        body.append(
            f'<polyline fill="none" style="stroke:var(--jp-brand-color1,#1e88e5)" '
            f'stroke-width="1.5" stroke-linejoin="round" points="{points}"/>'
            f'<circle cx="{lx:.1f}" cy="{ly:.1f}" r="2.5" '
            f'style="fill:var(--jp-brand-color1,#1e88e5)"/>'
        )
    svg = (
        f'<svg width="{CHART_W}" height="{CHART_H}" data-series="{name}" '
        f'data-points="{len(finite)}" data-count="{s.count}" data-last="{last!r}" '
        f'data-last-step="{step:g}" style="display:block">{"".join(body)}</svg>'
    )
    return (
        f'<div data-chart="{name}" style="width:{CHART_W}px;border:1px solid {BORDER};'
        f'border-radius:4px;padding:4px 0 0 0"><div style="padding:0 8px">{title}</div>{svg}</div>'
    )


def log_html(lines: list[str], rank: int) -> str:
    """The last lines of one rank's log in a box that shows its newest line.

    A column-reverse flex box starts scrolled to its end, with no script: ipywidgets.HTML
    replaces the content on every update, so a scroll position set by code would be lost.
    """
    body = html.escape("\n".join(lines)) if lines else "(no output yet)"
    return (
        f'<div data-rank="{rank}" data-lines="{len(lines)}" style="display:flex;'
        f"flex-direction:column-reverse;max-height:16em;overflow:auto;border:1px solid {BORDER};"
        f'border-radius:4px;background:var(--jp-layout-color2,#f5f5f5)">'
        # flex:none and overflow:visible: Lab's output CSS makes a <pre> scroll by itself,
        # which would shrink it into the box and show its top again.
        f'<pre style="flex:none;overflow:visible;margin:0;padding:4px 8px;font-size:85%;'
        f"line-height:1.35;"
        f'white-space:pre-wrap;font-family:var(--jp-code-font-family,monospace)">{body}</pre></div>'
    )
