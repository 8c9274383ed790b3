"""``layang queue``: the delivery queue by destination site, as lines or JSON, and a site
suspended (``queue suspend``, for a duration or until resumed) or resumed (``queue resume``)
(docs/delivery.md, "The queue, visible and steerable")."""

from __future__ import annotations

import re
from typing import Any

import click

from layang.cli.output import emit
from layang.cli.startup import fail, open_db, prepare
from layang.cli.uses import STORE, Uses
from layang.clock import iso_ms
from layang.domain.queue_view import SiteQueue, site_named, site_queues
from layang.models import MxDomain, SiteState
from layang.serving.preflight import EXISTING, Needs, database_location

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


@Uses(Needs(EXISTING), STORE)
@click.group("queue", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help='Print {"sites": [...]} instead of lines.')
@click.pass_context
def queue_group(context: click.Context, as_json: bool) -> None:
    """The delivery queue: one line per destination site (queued, in flight, sessions open /
    limit, state, last reply)."""
    if context.invoked_subcommand is not None:
        return

    config, _ = prepare()
    open_db(config, EXISTING)
    rows = site_queues()
    if as_json:
        emit({"sites": [site_json(row) for row in rows]})
    elif not rows:
        click.echo("The queue is empty.")
    for row in [] if as_json else rows:
        click.echo(site_line(row))


@Uses(Needs(EXISTING), STORE)
@queue_group.command("suspend")
@click.argument("site")
@click.option("--for", "duration", type=Duration(), help="e.g. 30m, 2h (default: until resumed)")
@click.option(
    "--force", is_flag=True, help="Suspend SITE even though no mail has gone to or waited for it."
)
def queue_suspend(site: str, duration: float | None, force: bool) -> None:
    """Stop new sessions to SITE (or to the site of a recipient domain) for a while or until
    resumed; prints the site. A site or domain Layang has never seen is refused (a typo would
    suspend nothing) unless --force."""
    from layang.clock import now_ms
    from layang.destinations import sites

    config, _ = prepare()
    open_db(config, EXISTING)
    name = site_named(site)
    if not force and not known_site(site, name):
        fail(
            f"No site or recipient domain named {site!r} has been seen in "
            f"{database_location(config.database_url)}: `layang queue` lists the sites. "
            "Check the name, or add --force to suspend it anyway.",
            1,
        )
    until = None if duration is None else now_ms() + int(duration * 1000)
    sites.suspend(name, until, "suspended by the operator")
    emit(next(site_json(row) for row in site_queues() if row.site == name))


@Uses(Needs(EXISTING), STORE)
@queue_group.command("resume")
@click.argument("site")
def queue_resume(site: str) -> None:
    """Let mail flow to SITE (or the site of a recipient domain) again at its full limit;
    prints the site."""
    from layang.destinations import sites

    config, _ = prepare()
    open_db(config, EXISTING)
    name = site_named(site)
    view = sites.resume(name)
    rows = [site_json(row) for row in site_queues() if row.site == name]
    emit(rows[0] if rows else {"site": name, "state": view.state})
