"""The overview's charts, drawn on the server as inline SVG: no script, no library to vendor,
and the figures are in the page as served. Each chart carries a title and a description for
screen readers; the page shows the same figures as text beside it."""

from __future__ import annotations

import math
from datetime import UTC, datetime

from markupsafe import Markup, escape

from layang.domain.overview import DAY_MS, Chart, Rate

COLOURS = {
    "sent": "#44506a",
    "delivered": "#1a7f4b",
    "deferred": "#c77700",
    "bounced": "#b42318",
    "complained": "#d6336c",
    "opened": "#2357d9",
    "clicked": "#6b3fc9",
    "hard": "#b42318",
    "soft": "#e8890c",
    "block": "#7a1c12",
    "undetermined": "#8a94a6",
}

WIDTH, HEIGHT = 960, 240
NARROW = 420
"""The width of a chart's phone version: drawn for a narrow screen rather than shrunk, its
labels stay readable and its y-axis in sight."""
LEFT, RIGHT, TOP, BOTTOM = 56, 12, 12, 28


def axis_ticks(largest: int, most: int = 5) -> tuple[int, ...]:
    """The y-axis of a chart of counts whose tallest value is ``largest``: ticks from 0, evenly
    spaced by 1, 2 or 5 x 10^n, the fewest steps (at most ``most``) that reach ``largest``.

    ``axis_ticks(3)`` is (0, 1, 2, 3), ``axis_ticks(7)`` (0, 2, 4, 6, 8), ``axis_ticks(0)``
    (0, 1). Counts are whole, so no step is below 1. Raises ``ValueError`` for a negative
    ``largest`` or ``most`` below 1.
    """
    if largest < 0 or most < 1:
        raise ValueError(f"axis_ticks: largest {largest} and most {most} must be 0+ and 1+")
    power = 1
    while True:
        for factor in (1, 2, 5):
            step = factor * power
            if largest <= step * most:
                count = max(1, math.ceil(largest / step))
                return tuple(step * i for i in range(count + 1))
        power *= 10


def point_label(chart: Chart, start: int, short: bool = False) -> str:
    """The time of the point starting at ``start`` (epoch ms), as an axis names it: the day
    for daily points (and, ``short``, for any period longer than a day), else the time."""
    moment = datetime.fromtimestamp(start / 1000, UTC)
    if chart.period.step_ms >= DAY_MS or (short and chart.period.span_ms > DAY_MS):
        return moment.strftime("%d %b")
    if chart.period.span_ms > DAY_MS:
        return moment.strftime("%d %b %H:%M")
    return moment.strftime("%H:%M")


def _frame(
    chart: Chart, ticks: tuple[int, ...], title: str, description: str, width: int
) -> list[str]:
    plot_h = HEIGHT - TOP - BOTTOM
    top = ticks[-1]
    kind = "chart-narrow" if width < WIDTH else "chart-wide"
    parts = [
        f'<svg class="chart {kind}" viewBox="0 0 {width} {HEIGHT}" role="img" '
        f'aria-label="{escape(title)}">',
        f"<title>{escape(title)}</title><desc>{escape(description)}</desc>",
    ]
    for tick in ticks:
        y = TOP + plot_h - plot_h * tick / top
        parts.append(
            f'<line class="grid" x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">'
            f"{tick:,}</text>"
        )
    points = len(chart.starts)
    every = max(1, math.ceil(points / (8 if width >= WIDTH else 4)))
    for i in range(0, points, every):
        x = _x(i, points, width)
        parts.append(
            f'<text class="axis" x="{x:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
            f"{escape(point_label(chart, chart.starts[i], short=width < WIDTH))}</text>"
        )
    return parts


def _x(i: int, points: int, width: int = WIDTH) -> float:
    plot_w = width - LEFT - RIGHT
    return LEFT + plot_w * (i + 0.5) / points


def _y(value: int, top: int) -> float:
    plot_h = HEIGHT - TOP - BOTTOM
    return TOP + plot_h - plot_h * value / top


def describe(chart: Chart) -> str:
    totals = ", ".join(f"{s.label.lower()} {s.total:,}" for s in chart.series)
    return f"Over the {chart.period.label}: {totals}."


def line_chart(chart: Chart, title: str, width: int = WIDTH) -> Markup:
    """One line per series, a point per step; hovering a point names its figure. ``width``
    is the drawing's (``NARROW`` for phones)."""
    ticks = axis_ticks(max((max(s.values, default=0) for s in chart.series), default=0))
    top = ticks[-1]
    parts = _frame(chart, ticks, title, describe(chart), width)
    points = len(chart.starts)
    for series in chart.series:
        colour = COLOURS.get(series.key, "#44506a")
        coords = " ".join(
            f"{_x(i, points, width):.1f},{_y(v, top):.1f}" for i, v in enumerate(series.values)
        )
        parts.append(
            f'<g class="series" data-series="{series.key}">'
            f'<polyline fill="none" stroke="{colour}" stroke-width="2" points="{coords}"/>'
        )
        for i, value in enumerate(series.values):
            if value:
                label = f"{series.label} {point_label(chart, chart.starts[i])}: {value:,}"
                parts.append(
                    f'<circle cx="{_x(i, points, width):.1f}" cy="{_y(value, top):.1f}" r="3" '
                    f'fill="{colour}"><title>{escape(label)}</title></circle>'
                )
        parts.append("</g>")
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every value above is a number or escaped


def stacked_bars(chart: Chart, title: str, width: int = WIDTH) -> Markup:
    """One bar per step, its series stacked. ``width`` is the drawing's (``NARROW`` for
    phones)."""
    columns = zip(*(s.values for s in chart.series), strict=True)
    tallest = max((sum(column) for column in columns), default=0)
    ticks = axis_ticks(tallest)
    top = ticks[-1]
    parts = _frame(chart, ticks, title, describe(chart), width)
    points = len(chart.starts)
    bar = (width - LEFT - RIGHT) / points * 0.7
    base = [0] * points
    for series in chart.series:
        colour = COLOURS.get(series.key, "#44506a")
        parts.append(f'<g class="series" data-series="{series.key}">')
        for i, value in enumerate(series.values):
            if value:
                y_top, y_bottom = _y(base[i] + value, top), _y(base[i], top)
                label = f"{series.label} {point_label(chart, chart.starts[i])}: {value:,}"
                parts.append(
                    f'<rect x="{_x(i, points, width) - bar / 2:.1f}" y="{y_top:.1f}" '
                    f'width="{bar:.1f}" height="{y_bottom - y_top:.1f}" fill="{colour}">'
                    f"<title>{escape(label)}</title></rect>"
                )
                base[i] += value
        parts.append("</g>")
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every value above is a number or escaped


def percent(value: float | None) -> str:
    if value is None:
        return "—"
    shown = value * 100
    return f"{shown:.2f} %" if shown < 1 else f"{shown:.1f} %"


def rate_gauge(rate: Rate) -> Markup:
    """The rate as a bar on a scale that shows its warning and its limit: twice the limit wide,
    so a rate past that fills the bar rather than squeezing the thresholds out of sight."""
    width, height = 320, 36
    value = rate.value or 0.0
    scale = 1.0 if rate.limit is None else rate.limit * 2
    parts = [
        f'<svg class="gauge" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{escape(rate.label)} {escape(percent(rate.value))}">',
        f'<rect x="0" y="10" width="{width}" height="12" rx="6" fill="#eef0f4"/>',
    ]
    if rate.warn is not None and rate.limit is not None:
        warn_x, limit_x = width * rate.warn / scale, width * rate.limit / scale
        parts.append(
            f'<rect x="{warn_x:.1f}" y="10" width="{limit_x - warn_x:.1f}" height="12" '
            f'fill="#fff4e0"/><rect x="{limit_x:.1f}" y="10" width="{width - limit_x:.1f}" '
            f'height="12" fill="#fdecea"/>'
        )
        for x, label in ((warn_x, percent(rate.warn)), (limit_x, percent(rate.limit))):
            parts.append(
                f'<line class="threshold" x1="{x:.1f}" x2="{x:.1f}" y1="6" y2="26" '
                f'stroke="#5b6475"/><text class="axis" x="{x:.1f}" y="{height - 1}" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
    colour = {"bad": "#b42318", "warn": "#c77700"}.get(rate.standing, "#1a7f4b")
    parts.append(
        f'<rect class="value" x="0" y="12" width="{width * min(value / scale, 1):.1f}" '
        f'height="8" rx="4" fill="{colour}"/></svg>'
    )
    return Markup("".join(parts))  # noqa: S704 - every value above is a number or escaped
