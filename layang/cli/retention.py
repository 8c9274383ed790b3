"""``layang retention``, ``layang recipients erase`` and ``layang accounts set``: what Layang
keeps, for how long, and erasing a person (docs/deploy.md, "What is kept, and for how long")."""

from __future__ import annotations

from datetime import UTC, datetime

import click

from layang.cli.output import domain_errors, emit
from layang.cli.startup import account_named, open_db, prepare
from layang.cli.uses import STORE, Uses
from layang.clock import iso_ms, now_ms
from layang.serving.preflight import EXISTING, Needs
from layang.team import audit

RETENTION = ("retention_days", "content_retention_days")


class IsoDate(click.ParamType):
    """``2027-01-15`` (midnight UTC) or an ISO 8601 time (UTC unless it says otherwise), as
    epoch milliseconds."""

    name = "iso-date"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None):
        if isinstance(value, int):
            return value
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            self.fail(f"{value!r} is not an ISO 8601 date such as 2027-01-15", param, ctx)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return int(moment.timestamp() * 1000)


AS_OF = click.option(
    "--as-of",
    "as_of",
    type=IsoDate(),
    default=None,
    help="Apply the settings as if it were this time (ISO 8601; default: now).",
)


@click.group("retention")
def retention_group() -> None:
    """Retention: removing records, events, content and webhook history past their time."""


@Uses(Needs(EXISTING), STORE, RETENTION)
@retention_group.command("run")
@AS_OF
def retention_run(as_of: int | None) -> None:
    """Remove now what retention no longer keeps (the worker does it every few minutes);
    prints {"asOf", "records", "events", "messages", "contents", "webhookDeliveries"}."""
    from layang.lifecycle import retention

    config, _ = prepare()
    open_db(config, EXISTING)
    moment = now_ms() if as_of is None else as_of
    removed = retention.apply(config, moment)
    emit({"asOf": iso_ms(moment), **removed.as_json()})


@Uses(Needs(EXISTING), STORE, RETENTION)
@retention_group.command("show")
@AS_OF
def retention_show(as_of: int | None) -> None:
    """Count what `retention run` would remove, removing nothing; prints the same object with
    the service's settings ("retentionDays", "contentRetentionDays")."""
    from layang.lifecycle import retention

    config, _ = prepare()
    open_db(config, EXISTING)
    moment = now_ms() if as_of is None else as_of
    shown = retention.show(config, moment)
    emit(
        {
            "asOf": iso_ms(moment),
            "retentionDays": config.retention_days,
            "contentRetentionDays": config.content_retention_days,
            **shown.as_json(),
        }
    )


@click.group("recipients")
def recipients_group() -> None:
    """A person's data in an account."""


@Uses(Needs(EXISTING), STORE)
@recipients_group.command("erase")
@click.argument("email")
@click.option("--account", "account_name", required=True, help="The account to erase it from.")
@click.option("--suppression", is_flag=True, help="Take the address off the suppression list too.")
def recipients_erase(email: str, account_name: str, suppression: bool) -> None:
    """Erase EMAIL from one account: its records, events, undelivered webhook events and the
    messages sent only to it (GDPR art. 17); prints {"email", "records", "events", "messages"}."""
    from layang.lifecycle.erasure import erase_recipient

    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        erased = erase_recipient(
            account_named(account_name, config),
            email,
            actor=audit.SYSTEM,
            source=audit.CLI,
            suppression=suppression,
        )
    emit(
        {
            "email": erased.email,
            "records": erased.records,
            "events": erased.events,
            "messages": erased.messages,
        }
    )


@Uses(Needs(EXISTING), STORE, RETENTION)
@click.command("set")
@click.argument("name")
@click.option("--retention-days", type=click.IntRange(1), help="Days records and events are kept.")
@click.option(
    "--content-days",
    type=click.IntRange(0),
    help="Days content is kept after the last recipient is final.",
)
@click.option(
    "--store-content/--no-store-content",
    default=None,
    help="--no-store-content: remove content as soon as every recipient is final.",
)
@click.option(
    "--default", "defaults", is_flag=True, help="Return both numbers to the service's settings."
)
def accounts_set(
    name: str,
    retention_days: int | None,
    content_days: int | None,
    store_content: bool | None,
    defaults: bool,
) -> None:
    """Set account NAME's retention; prints {"name", "mode", "retentionDays", "contentDays",
    "storeContent"} as in force."""
    from layang.lifecycle import retention

    config, _ = prepare()
    open_db(config, EXISTING)
    changes: dict[str, object] = {}
    if defaults:
        changes.update(retention_days=None, content_days=None)
    if retention_days is not None:
        changes["retention_days"] = retention_days
    if content_days is not None:
        changes["content_days"] = content_days
    if store_content is not None:
        changes["store_content"] = store_content
    with domain_errors():
        state = retention.change_retention(
            account_named(name, config),
            config,
            **changes,
            actor=audit.SYSTEM,
            source=audit.CLI,
        )
    emit(
        {
            "name": state.name,
            "mode": state.mode,
            "retentionDays": state.retention_days,
            "contentDays": state.content_days,
            "storeContent": state.store_content,
        }
    )
