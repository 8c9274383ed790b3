"""Reading what happened to every email: the Activity records of an account."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import peewee

from layang.clock import iso_ms
from layang.domain.errors import NotFound
from layang.models import DELIVERY_STATES, INJECTION, Account, Event, Recipient, Transmission


def _events_by_recipient(recipient_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    ids = list(recipient_ids)
    if not ids:
        return grouped
    query = (
        Event.select(Event.recipient, Event.status, Event.created_at, Event.detail)
        .where(Event.recipient.in_(ids))
        .order_by(Event.id)
        .tuples()
    )
    for recipient_id, status, created_at, detail in query:
        grouped[recipient_id].append(
            {"status": status, "timestamp": iso_ms(created_at), "detail": json.loads(detail)}
        )
    return grouped


def _record(
    recipient: Recipient, transmission: Transmission, events: list[dict[str, Any]]
) -> dict[str, Any]:
    # Injection is the record's creation, so it is not stored as an event row of its own:
    # one INSERT less on the intake path of every message.
    injection = {
        "status": INJECTION,
        "timestamp": iso_ms(recipient.created_at),
        "detail": {"source": transmission.source},
    }
    return {
        "id": recipient.id,
        "transmissionId": transmission.id,
        "messageId": transmission.message_id,
        "recipient": recipient.address,
        "recipientType": recipient.recipient_type,
        "from": json.loads(transmission.from_header),
        "subject": transmission.subject,
        "status": recipient.status,
        "createdAt": iso_ms(recipient.created_at),
        "updatedAt": iso_ms(recipient.updated_at),
        "metadata": json.loads(transmission.metadata),
        "events": [injection, *events],
    }


def list_activity(
    account: Account,
    *,
    status: str | None = None,
    recipient: str | None = None,
    transmission_id: str | None = None,
    since: int | None = None,
    until: int | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of the account's records, newest first, and the cursor of the next page.

    ``status`` is a delivery state (the record's current one) or ``Open``/``Click`` (records
    with such an event); ``since``/``until`` bound the creation time (epoch ms, inclusive).
    """
    query = (
        Recipient.select(Recipient, Transmission)
        .join(Transmission)
        .where(Recipient.account == account.id)
        .order_by(Recipient.id.desc())
        .limit(limit + 1)
    )
    if status in DELIVERY_STATES:
        query = query.where(Recipient.status == status)
    elif status:
        engaged = Event.select(Event.id).where(
            (Event.recipient == Recipient.id) & (Event.status == status)
        )
        query = query.where(peewee.fn.EXISTS(engaged))
    if recipient:
        query = query.where(peewee.fn.LOWER(Recipient.address) == recipient.strip().lower())
    if transmission_id:
        query = query.where(Recipient.transmission == transmission_id)
    if since is not None:
        query = query.where(Recipient.created_at >= since)
    if until is not None:
        query = query.where(Recipient.created_at <= until)
    if cursor:
        query = query.where(Recipient.id < cursor)
    rows = list(query)
    next_cursor = rows[limit - 1].id if len(rows) > limit else None
    rows = rows[:limit]
    events = _events_by_recipient(r.id for r in rows)
    return [_record(r, r.transmission, events[r.id]) for r in rows], next_cursor


def get_transmission_view(account: Account, transmission_id: str) -> dict[str, Any]:
    """The transmission and every recipient's record. Another account's id is ``NotFound``."""
    transmission = Transmission.get_or_none(
        (Transmission.id == transmission_id) & (Transmission.account == account.id)
    )
    if transmission is None:
        raise NotFound(f"No transmission {transmission_id!r}.")
    recipients = list(
        Recipient.select().where(Recipient.transmission == transmission.id).order_by(Recipient.id)
    )
    events = _events_by_recipient(r.id for r in recipients)
    return {
        "transmissionId": transmission.id,
        "createdAt": iso_ms(transmission.created_at),
        "source": transmission.source,
        "from": json.loads(transmission.from_header),
        "subject": transmission.subject,
        "recipients": [_record(r, transmission, events[r.id]) for r in recipients],
    }


def get_record(account: Account, record_id: str) -> dict[str, Any]:
    """One activity record of ``account``. Another account's record is ``NotFound``."""
    row = (
        Recipient.select(Recipient, Transmission)
        .join(Transmission)
        .where((Recipient.id == record_id) & (Recipient.account == account.id))
        .first()
    )
    if row is None:
        raise NotFound(f"No activity record {record_id!r}.")
    return _record(row, row.transmission, _events_by_recipient([row.id])[row.id])
