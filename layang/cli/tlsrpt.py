"""``layang tlsrpt send``: the TLS-RPT reports (RFC 8460) of one day sent now."""

from __future__ import annotations

import click

from layang.cli.output import emit
from layang.cli.startup import fail, open_db, prepare
from layang.cli.uses import STORE, Uses
from layang.serving.preflight import EXISTING, Needs

TLSRPT = (
    "tlsrpt",
    "tlsrpt_from",
    "bounce_domain",
    "dns_resolver",
    "tls_cafile",
    "mx_allow_private",
)


@click.group("tlsrpt")
def tlsrpt_group() -> None:
    """TLS-RPT (RFC 8460): daily reports to recipient domains about our TLS sessions."""


@Uses(Needs(EXISTING), STORE, TLSRPT)
@tlsrpt_group.command("send")
@click.option("--day", help="The UTC day, YYYY-MM-DD (default: yesterday).")
def tlsrpt_send(day: str | None) -> None:
    """Send the reports of DAY now (each domain's once); prints each domain's outcome."""
    from layang.destinations import tlsrpt

    config, _ = prepare()
    if not config.tlsrpt:
        fail("LAYANG_TLSRPT is false: no TLS-RPT reports are sent; unset it to send them")
    try:
        day = tlsrpt.parse_day(day) if day else tlsrpt.yesterday()
    except ValueError as error:
        fail(f"--day: {error}")
    open_db(config, EXISTING)
    outcomes = tlsrpt.send_reports(config, day)
    emit(
        {
            "day": day,
            "reports": [
                {"domain": o.domain, "status": o.status, "detail": o.detail} for o in outcomes
            ],
        }
    )
