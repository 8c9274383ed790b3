"""Cancelling and moving a scheduled send (CONTRACT section 23): only recipients still
``Scheduled`` change; a transmission with any recipient released to the queue is past changing
(``SendingStarted``, 409). Releasing: ``layang.mail.schedule``."""

from __future__ import annotations

from dataclasses import dataclass

import peewee

from layang.clock import now_ms
from layang.db import database, is_postgresql, write_transaction
from layang.domain.errors import Conflict, NotFound
from layang.mail.events import append_events
from layang.models import CANCELLED, SCHEDULED, SUPPRESSED, Account, Recipient, Transmission


class SendingStarted(Conflict):
    """The transmission is not (or no longer) waiting for its time: it cannot be cancelled or
    moved."""


@dataclass(frozen=True, slots=True)
class _Held:
    transmission: Transmission
    scheduled: list[str]


def _held(account: Account, transmission_id: str) -> _Held:
    """The account's transmission and its recipients still waiting, locked (inside a write
    transaction). Raises ``NotFound`` for another account's or an unknown id,
    ``SendingStarted`` when it was never scheduled or a recipient was released."""
    transmission = Transmission.get_or_none(
        (Transmission.id == transmission_id) & (Transmission.account == account.id)
    )
    if transmission is None:
        raise NotFound(f"No transmission {transmission_id!r}.")
    lock = " FOR UPDATE" if is_postgresql() else ""
    param = database.obj.param
    rows = database.execute_sql(
        f'SELECT "id", "status", "lease_owner" FROM "recipient" '
        f'WHERE "transmission_id" = {param}{lock}',
        (transmission_id,),
    ).fetchall()
    if transmission.scheduled_at is None:
        raise SendingStarted("This transmission was not scheduled: it is sent already.")
    if any(status not in (SCHEDULED, SUPPRESSED, CANCELLED) for _, status, _ in rows):
        raise SendingStarted("Sending has started: it can no longer be changed.")
    return _Held(transmission, [rid for rid, status, _ in rows if status == SCHEDULED])


def cancel(account: Account, transmission_id: str) -> None:
    """Cancel a scheduled transmission: each recipient still waiting becomes ``Cancelled``,
    with its Cancelled event, and is never sent. Cancelling one cancelled already changes
    nothing. Raises ``NotFound``, or ``SendingStarted`` once any recipient was released."""
    now = now_ms()
    with write_transaction():
        held = _held(account, transmission_id)
        if not held.scheduled:
            return
        param = database.obj.param
        marks = ", ".join([param] * len(held.scheduled))
        database.execute_sql(
            f'UPDATE "recipient" SET "status" = {param}, "scheduled_at" = NULL, '
            f'"updated_at" = {param} WHERE "id" IN ({marks})',
            (CANCELLED, now, *held.scheduled),
        )
        append_events([(rid, CANCELLED, now, "{}") for rid in held.scheduled])


def move(account: Account, transmission_id: str, scheduled_at: int) -> None:
    """Move a scheduled transmission to ``scheduled_at`` (epoch ms; a time past means now).
    Raises ``NotFound``, or ``SendingStarted`` once any recipient was released or when it
    was cancelled."""
    with write_transaction():
        held = _held(account, transmission_id)
        if not held.scheduled:
            raise SendingStarted("This transmission was cancelled.")
        param = database.obj.param
        marks = ", ".join([param] * len(held.scheduled))
        database.execute_sql(
            f'UPDATE "recipient" SET "scheduled_at" = {param}, "updated_at" = {param} '
            f'WHERE "id" IN ({marks})',
            (scheduled_at, now_ms(), *held.scheduled),
        )
        Transmission.update(scheduled_at=scheduled_at).where(
            Transmission.id == transmission_id
        ).execute()


@dataclass(frozen=True, slots=True)
class ScheduledSend:
    """A transmission waiting for its time: when (epoch ms), its subject, sender, and how many
    recipients wait."""

    transmission_id: str
    scheduled_at: int
    subject: str
    sender: str
    recipients: int


def list_scheduled(account: Account, limit: int = 200) -> list[ScheduledSend]:
    """The account's transmissions with recipients still ``Scheduled``, soonest first, at
    most ``limit``: read through the index on (account, status)."""
    waiting = peewee.fn.COUNT(Recipient.id)
    rows = (
        Recipient.select(
            Recipient.transmission,
            Transmission.scheduled_at,
            Transmission.subject,
            Transmission.mail_from,
            waiting,
        )
        .join(Transmission)
        .where((Recipient.account == account.id) & (Recipient.status == SCHEDULED))
        .group_by(
            Recipient.transmission,
            Transmission.scheduled_at,
            Transmission.subject,
            Transmission.mail_from,
        )
        .order_by(Transmission.scheduled_at, Recipient.transmission)
        .limit(limit)
        .tuples()
    )
    return [ScheduledSend(*row) for row in rows]
