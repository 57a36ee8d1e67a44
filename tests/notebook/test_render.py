"""The job widget's HTML and SVG, read as XML: what each render function promises."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from workbench.spec import JobEvent, JobRecord, JobStatus, RankRecord, RankState
from workbench.widgets._feed import Progress, Series
from workbench.widgets._render import (
    CHART_H,
    CHART_W,
    chart_svg,
    log_html,
    nice_ticks,
    status_html,
    tick_label,
)

SVG = ""  # inline SVG in HTML: no xmlns, the browser puts it in the SVG namespace


def _xml(markup: str) -> ET.Element:
    """Parse a render function's output (it must be well-formed: no named entities)."""
    return ET.fromstring(f"<root>{markup}</root>")


def _text(el: ET.Element) -> str:
    return "".join(el.itertext())


def _record(status: JobStatus, state: RankState, exit_code: int | None) -> JobRecord:
    return JobRecord(
        name="demo<1>",
        status=status,
        backend="local",
        spec={"workers": 2, "max_retries": 1},
        image="pytorch",
        created_at=100.0,
        started_at=100.0,
        finished_at=130.0,
        price_per_hour=0.17,
        ranks=[
            RankRecord(rank=r, state=state, details={"pid": 4000 + r}, exit_code=exit_code)
            for r in (0, 1)
        ],
        events=[JobEvent(101.0, "Started", "2 worker(s) started", "info")],
    )


def _series(name: str, steps: list[float], values: list[float]) -> Series:
    s = Series(name)
    for x, y in zip(steps, values, strict=True):
        s.add(x, y)
    return s


def test_status_is_a_badge_and_rank_cells_are_separate_padded_columns() -> None:
    html = status_html(_record(JobStatus.SUCCEEDED, RankState.SUCCEEDED, 0), Progress(), [], "n/a")
    root = _xml(html)
    (badge,) = root.iterfind(".//*[@data-status]")
    assert badge.tag == "span" and badge.get("data-status") == "Succeeded"
    assert _text(badge) == "Succeeded"
    assert "demo&lt;1&gt;" in html  # the job name is escaped
    assert "attempt 1 of 2" in _text(root)
    rows = root.findall(".//tr[@data-rank]")
    assert [[_text(td) for td in tr.findall("td")] for tr in rows] == [
        ["0", "Succeeded", "0", "4000", "-"],
        ["1", "Succeeded", "0", "4001", "-"],
    ]
    for cell in [*root.iterfind(".//td"), *root.iterfind(".//th")]:
        style = cell.get("style", "")
        assert "padding:2px 16px 2px 0" in style, style  # "Succeeded0" was cells with none


def test_chart_has_its_whole_title_outside_the_plot_and_a_step_axis() -> None:
    steps = [float(i) for i in range(1, 13)]
    values = [1.0 / i for i in range(1, 13)]
    root = _xml(chart_svg({"loss": _series("loss", steps, values)}))
    panel = root.find(".//div[@data-chart='loss']")
    assert panel is not None
    # The title is HTML above the SVG, so it wraps instead of being clipped by the plot.
    title = panel.find(".//div[@data-chart-title]")
    assert title is not None and _text(title) == "loss 0.08333 at step 12"
    svg = panel.find(f"{SVG}svg")
    assert svg is not None and svg.find(f".//{SVG}text[@data-chart-title]") is None
    assert svg.get("data-points") == "12" and svg.get("data-last-step") == "12"

    axis = svg.find(f"{SVG}g[@data-axis='step']")
    assert axis is not None
    label = axis.find(f"{SVG}text[@data-axis-label]")
    assert label is not None and label.text == "step"
    ticks = [
        (float(t.get("data-tick", "")), float(t.get("x", "")))
        for t in axis.iterfind(f"{SVG}text[@data-tick]")
    ]
    assert [v for v, _ in ticks] == [2.0, 4.0, 6.0, 8.0, 10.0, 12.0]
    assert all(0 < x < CHART_W for _, x in ticks) and [x for _, x in ticks] == sorted(
        x for _, x in ticks
    )

    value_axis = svg.find(f"{SVG}g[@data-axis='value']")
    assert value_axis is not None
    y_ticks = [float(t.get("data-tick", "")) for t in value_axis.iterfind(f"{SVG}text[@data-tick]")]
    assert y_ticks[0] <= min(values) and y_ticks[-1] >= max(values) and len(y_ticks) >= 3

    line = svg.find(f"{SVG}polyline")
    assert line is not None
    points = [tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
    assert len(points) == 12
    assert all(0 < x < CHART_W and 0 < y < CHART_H for x, y in points)
    assert [x for x, _ in points] == sorted(x for x, _ in points)
    assert points[0][1] < points[-1][1]  # falling loss: the first point is drawn higher


@pytest.mark.parametrize(
    ("steps", "values"),
    [([5.0], [0.5]), ([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]), ([1.0, 2.0], [math.nan, 1.0])],
    ids=["one-point", "flat", "nan"],
)
def test_chart_edge_cases_draw_a_marker_and_finite_axes(
    steps: list[float], values: list[float]
) -> None:
    root = _xml(chart_svg({"x": _series("x", steps, values)}))
    svg = root.find(f".//{SVG}svg")
    assert svg is not None and svg.find(f"{SVG}circle") is not None
    ticks = [t.get("data-tick", "") for t in svg.iterfind(f".//{SVG}text[@data-tick]")]
    assert ticks and all(math.isfinite(float(t)) for t in ticks)
    for line in svg.iterfind(f".//{SVG}polyline"):
        assert "nan" not in line.get("points", "")


def test_chart_without_scalars_says_how_to_report_them() -> None:
    assert "workbench.run.log" in _text(_xml(chart_svg({})))


def test_nice_ticks_and_labels() -> None:
    assert nice_ticks(1, 30, 5) == [5, 10, 15, 20, 25, 30]
    assert nice_ticks(1, 40, 5) == [10, 20, 30, 40]
    assert nice_ticks(0.28, 1.74, 4) == [0.5, 1.0, 1.5]
    assert nice_ticks(3, 3, 5) == [3] and nice_ticks(1, math.inf, 5) == []
    labels = [tick_label(v) for v in (0, 0.25, 1500, 15000, 123456, 2e6, 3e-5)]
    assert labels == ["0", "0.25", "1500", "15k", "123.5k", "2M", "3e-05"]


def test_log_box_is_anchored_at_its_newest_line_and_escapes_output() -> None:
    lines = [f"line {i}" for i in range(39)] + ["<b>not bold</b> & done"]
    root = _xml(log_html(lines, rank=1))
    (box,) = root
    assert box.get("data-rank") == "1" and box.get("data-lines") == "40"
    # column-reverse starts a scroll box at its end, with no script (browser test checks it).
    assert "flex-direction:column-reverse" in box.get("style", "")
    assert "overflow:auto" in box.get("style", "")
    (pre,) = box
    assert "flex:none" in pre.get("style", "")  # else the <pre> shrinks and scrolls itself
    assert pre.text is not None and pre.text.split("\n") == lines
    assert _text(_xml(log_html([], rank=0))) == "(no output yet)"
