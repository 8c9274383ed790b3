"""``layang queue``: the delivery queue by destination site, as lines or JSON, and the
durations ``layang queue suspend --for`` takes."""

from __future__ import annotations

import re
from typing import Any

import click

from layang.clock import iso_ms
from layang.domain.queue_view import SiteQueue, site_queues
from layang.models import MxDomain, SiteState

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Duration(click.ParamType):
    """``90s``, ``30m``, ``2h``, ``1d`` (or bare seconds) as seconds."""

    name = "duration"

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        if isinstance(value, int | float):
            return float(value)
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", str(value).lower())
        if not match or float(match[1]) <= 0:
            self.fail(f"{value!r} is not a duration such as 90s, 30m, 2h or 1d", param, ctx)
        return float(match[1]) * _UNITS[match[2] or "s"]


def site_json(row: SiteQueue) -> dict[str, Any]:
    """One site as ``layang queue --json`` prints it (docs/delivery.md, "The queue, visible
    and steerable")."""
    return {
        "site": row.site,
        "domains": list(row.domains),
        "queued": row.queued,
        "inFlight": row.in_flight,
        "sessions": row.sessions,
        "limit": row.limit,
        "state": row.state,
        "until": iso_ms(row.until_ms) if row.until_ms is not None else None,
        "lastReply": row.last_reply,
    }


def site_line(row: SiteQueue) -> str:
    """One site as a line: queued, in flight, sessions open / limit, state, last reply."""
    limit = "-" if row.limit is None else str(row.limit)
    state = row.state
    if row.until_ms is not None:
        state += f" until {iso_ms(row.until_ms)}"
    elif row.state == "suspended":
        state += " until resumed"
    parts = [
        row.site,
        f"queued {row.queued}",
        f"in flight {row.in_flight}",
        f"sessions {row.sessions}/{limit}",
        state,
    ]
    if row.last_reply:
        parts.append(f"last reply: {row.last_reply.strip()}")
    return "  ".join(parts)


def known_site(given: str, site: str) -> bool:
    """Whether Layang has seen ``given`` (as typed) or the ``site`` it names: a recipient
    domain resolved to its site, a site with waiting mail, sessions or a state of its own, or
    a domain with waiting mail."""
    typed = given.strip().rstrip(".").lower()
    if site != typed:
        return True  # a recipient domain that resolved to a site
    if SiteState.get_or_none(SiteState.site == site) is not None:
        return True
    if MxDomain.select().where(MxDomain.site == site).exists():
        return True
    return any(row.site == site or site in row.domains for row in site_queues())
