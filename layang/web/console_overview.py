"""The console's landing page: the overview of the account's mail (docs/api.md, "The
overview"), of all of it or of one stream (docs/api.md, "Streams and the circuit breaker")."""

from __future__ import annotations

from typing import Any

import flask
from flask import current_app, flash, render_template, request

from layang.domain import overview
from layang.models import STREAMS, Account
from layang.web import charts
from layang.web.console import signed_in


@signed_in
def overview_page(account: Account) -> Any:
    key = request.args.get("period", overview.DEFAULT_PERIOD)
    if key not in overview.PERIODS:
        flash(f"period: {key!r} is not one of {', '.join(overview.PERIODS)}.", "error")
        key = overview.DEFAULT_PERIOD
    stream = request.args.get("stream") or None
    if stream is not None and stream not in STREAMS:
        flash(f"stream: {stream!r} is not one of {', '.join(STREAMS)}.", "error")
        stream = None
    period = overview.PERIODS[key]
    activity = overview.activity(account, period, stream=stream)
    # Headings and chart titles name the stream, so a chart read on its own says what it shows.
    narrowed = f", {stream} mail" if stream else ""
    of = f", {period.label}{narrowed}"
    return render_template(
        "console/overview.html",
        period=period,
        periods=overview.PERIODS.values(),
        stream=stream,
        streams=STREAMS,
        of=of,
        narrowed=narrowed,
        activity=activity,
        # Each chart twice: for wide screens and drawn for phones; CSS shows one.
        activity_chart=charts.line_chart(activity.chart, f"Activity{of}")
        + charts.line_chart(activity.chart, f"Activity{of}", charts.NARROW),
        bounce_chart=charts.stacked_bars(activity.bounces, f"Bounces by class{of}")
        + charts.stacked_bars(activity.bounces, f"Bounces by class{of}", charts.NARROW),
        domains=activity.domains,
        tags=overview.tag_figures(account, period),
        waiting=overview.waiting_by_destination(account, stream=stream),
        notices=overview.needs_attention(account, current_app.config["LAYANG"]),
        gauge=charts.rate_gauge,
        percent=charts.percent,
        point_label=charts.point_label,
    )


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/console/overview", "console_overview", overview_page)
