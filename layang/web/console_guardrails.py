"""The console's deliverability guardrails (docs/api.md, "Streams and the circuit breaker"):
the circuit breaker's banner on every page, and on the Domains page each domain's DMARC
sources (a chart drawn here as SVG, with the unknown sources called out) and, on request, its
sender requirements check. The same domain functions as the API."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import flask
from flask import current_app
from markupsafe import Markup, escape

from layang.domain import breaker
from layang.domain.compliance import Compliance, check_compliance
from layang.domain.dmarc import DmarcFigures, Source, dmarc_figures
from layang.domain.errors import LayangError

CHART_SOURCES = 12
_BAR_HEIGHT = 22
_LABEL_WIDTH = 150
_BAR_WIDTH = 420


@dataclass(frozen=True, slots=True)
class DomainPanel:
    dmarc: DmarcFigures | None
    chart: Markup
    compliance: Compliance | None


def _account() -> Any:
    return flask.g.get("console_account")


def breaker_banner() -> list[breaker.Standing]:
    """The signed-in account's breakers above clear (empty when signed out)."""
    account = _account()
    if account is None:
        return []
    return breaker.standings(account, current_app.config["LAYANG"])


def domain_panel(domain: str) -> DomainPanel:
    """The DMARC figures of the last 30 days and their chart for ``domain``; its requirements
    check when the page asks for it (``?check=<domain>``: it looks DNS up)."""
    account = _account()
    config = current_app.config["LAYANG"]
    try:
        figures: DmarcFigures | None = dmarc_figures(account, domain, None, None, config)
    except LayangError:
        figures = None
    compliance = None
    if flask.request.args.get("check") == domain:
        try:
            compliance = check_compliance(account, domain, config)
        except LayangError:
            compliance = None
    chart = dmarc_chart(figures) if figures is not None and figures.sources else Markup("")
    return DomainPanel(figures, chart, compliance)


def _bar(index: int, source: Source, widest: int) -> str:
    y = index * _BAR_HEIGHT
    width = max(2, round(_BAR_WIDTH * source.count / widest))
    kind = "known" if source.known else "unknown"
    checks = f"SPF {source.spf}{'' if source.spf_aligned else ' (not aligned)'}, "
    checks += f"DKIM {source.dkim}{'' if source.dkim_aligned else ' (not aligned)'}"
    label = escape(source.ip)
    return (
        f'<g class="source source-{kind}" data-ip="{label}">'
        f"<title>{label}: {source.count} messages, {escape(checks)}, "
        f"{escape(source.disposition)}{'' if source.known else ', unknown source'}</title>"
        f'<text x="0" y="{y + 15}" class="ip">{label}</text>'
        f'<rect x="{_LABEL_WIDTH}" y="{y + 3}" width="{width}" height="{_BAR_HEIGHT - 6}" '
        f'class="bar bar-{kind}" fill="{"#2f7d4a" if source.known else "#c0392b"}"/>'
        f'<text x="{_LABEL_WIDTH + width + 6}" y="{y + 15}" class="count">{source.count}</text>'
        "</g>"
    )


def dmarc_chart(figures: DmarcFigures) -> Markup:
    """Horizontal bars, one per source (the largest ``CHART_SOURCES``), green for Layang's
    own, red for unknown sources; drawn on the server, so the page needs no script."""
    shown = figures.sources[:CHART_SOURCES]
    widest = max(source.count for source in shown)
    height = len(shown) * _BAR_HEIGHT
    width = _LABEL_WIDTH + _BAR_WIDTH + 60
    bars = "".join(_bar(index, source, widest) for index, source in enumerate(shown))
    return Markup(  # noqa: S704 - every value in it is a number or escaped above
        f'<svg class="dmarc-chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" font-size="12" font-family="sans-serif" '
        f'aria-label="DMARC sources of {escape(figures.domain)}">{bars}</svg>'
    )


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_app_template_global(breaker_banner, "breaker_banner")
    blueprint.add_app_template_global(domain_panel, "domain_panel")
