"""HTML and SVG for the job widget: plain strings, so ipywidgets.HTML shows them with no
frontend extension, and tests can read them from the widget's model state."""

from __future__ import annotations

import html
import math
import time
from typing import Any

from ..api import format_duration
from ..spec import JobRecord
from ._feed import Progress, Series

STATUS_COLOURS = {
    "Pending": "#9e9e9e",
    "Running": "#1e88e5",
    "Succeeded": "#43a047",
    "Failed": "#e53935",
    "Cancelled": "#fb8c00",
}
LEVEL_COLOURS = {"info": "inherit", "warning": "#fb8c00", "error": "#e53935"}
EVENTS_SHOWN = 6
CHART_W, CHART_H, PAD = 220, 90, 4


def status_html(
    record: JobRecord, progress: Progress, gpus: list[dict[str, Any]], gpu_note: str | None
) -> str:
    """Header (status, elapsed, cost, retries), per-rank table, ETA, GPUs and recent events."""
    now = time.time()
    s = record.status.value
    retries = int(record.spec.get("max_retries", 0))
    elapsed, cost = record.elapsed(now), record.cost(now)
    head = (
        f"<b>{html.escape(record.name)}</b> "
        f'<span data-status="{s}" style="color:white;background:{STATUS_COLOURS.get(s, "#757575")};'
        f'padding:0 6px;border-radius:3px">{s}</span> '
        f'&middot; elapsed <span data-elapsed="{elapsed:.0f}">{format_duration(elapsed)}</span>'
        f' &middot; cost <span data-cost="{cost:.6f}">${cost:.4f}</span>'
        f" (${record.price_per_hour:.2f}/h &times; {record.workers} worker(s))"
        f" &middot; attempt {record.attempt} of {retries + 1}"
    )
    parts = [f"<div>{head}</div>"]
    if record.message:
        parts.append(f"<div><i>{html.escape(record.message)}</i></div>")
    if progress.step is not None:
        eta = progress.eta()
        total = f"/{progress.total}" if progress.total else ""
        eta_text = (
            "" if eta is None or record.status.terminal else f" &middot; ETA {format_duration(eta)}"
        )
        parts.append(
            f'<div data-step="{progress.step}">step {progress.step}{total}{eta_text}</div>'
        )
    rows = "".join(
        f'<tr data-rank="{r.rank}"><td>{r.rank}</td><td>{r.state.value}</td>'
        f"<td>{'' if r.exit_code is None else r.exit_code}</td><td>{r.pid or ''}</td>"
        f"<td>{html.escape(r.gpus or '-')}</td></tr>"
        for r in record.ranks
    )
    if rows:
        parts.append(
            '<table style="border-collapse:collapse;font-size:90%"><tr><th>rank</th><th>state</th>'
            f"<th>exit</th><th>pid</th><th>GPUs</th></tr>{rows}</table>"
        )
    parts.append(f"<div>{gpu_html(gpus, gpu_note)}</div>")
    events = record.events[-EVENTS_SHOWN:]
    if events:
        items = "".join(
            f'<li style="color:{LEVEL_COLOURS.get(e.level, "inherit")}" '
            f'data-event="{html.escape(e.reason)}">'
            f"{time.strftime('%H:%M:%S', time.localtime(e.time))} <b>{html.escape(e.reason)}</b> "
            f"{html.escape(e.message)}</li>"
            for e in events
        )
        parts.append(f'<ul style="margin:2px 0;padding-left:18px;font-size:90%">{items}</ul>')
    return "".join(parts)


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
            bits.append(f"{g['temperature']:.0f}&deg;C")
        if isinstance(g.get("power"), (int, float)):
            bits.append(f"{g['power']:.0f} W")
        if g.get("error"):
            bits.append(f'<span style="color:#e53935">{html.escape(str(g["error"]))}</span>')
        cells.append(f"{html.escape(label)}: {', '.join(bits) or 'n/a'}")
    return "GPUs: " + " &middot; ".join(cells)


def chart_svg(series: dict[str, Series]) -> str:
    """One small line chart per scalar (own scale each), as inline SVG."""
    if not series:
        return (
            '<div style="color:#757575">no scalars yet (report them with workbench.run.log)</div>'
        )
    panels = [_panel(s) for s in list(series.values())[:6]]
    return f'<div style="display:flex;flex-wrap:wrap;gap:8px">{"".join(panels)}</div>'


def _panel(s: Series) -> str:
    finite = [(x, y) for x, y in zip(s.steps, s.values, strict=True) if math.isfinite(y)]
    last = s.values[-1] if s.values else float("nan")
    step = s.steps[-1] if s.steps else 0
    points = ""
    lo = hi = 0.0
    if finite:
        xs, ys = [p[0] for p in finite], [p[1] for p in finite]
        x0, x1 = min(xs), max(xs)
        lo, hi = min(ys), max(ys)
        xr, yr = (x1 - x0) or 1.0, (hi - lo) or 1.0
        w, h = CHART_W - 2 * PAD, CHART_H - 2 * PAD - 14
        points = " ".join(
            f"{PAD + (x - x0) / xr * w:.1f},{PAD + 14 + h - (y - lo) / yr * h:.1f}"
            for x, y in finite
        )
    name = html.escape(s.name)
    return (
        f'<svg width="{CHART_W}" height="{CHART_H}" data-series="{name}" '
        f'data-points="{len(finite)}" '
        f'data-count="{s.count}" data-last="{last!r}" data-last-step="{step:g}" '
        f'style="border:1px solid #ccc"><text x="{PAD}" y="12" font-size="11">{name} '
        f"{last:.4g} @ {step:g} (min {lo:.3g}, max {hi:.3g})</text>"
        f'<polyline fill="none" stroke="#1e88e5" stroke-width="1.5" points="{points}"/></svg>'
    )


def log_html(lines: list[str], rank: int) -> str:
    """The last lines of one rank's log in a scrolled box."""
    body = html.escape("\n".join(lines)) if lines else "(no output yet)"
    return (
        f'<pre data-rank="{rank}" data-lines="{len(lines)}" style="max-height:16em;overflow:auto;'
        f'margin:0;font-size:85%;white-space:pre-wrap">{body}</pre>'
    )
