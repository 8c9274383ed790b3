"""Reading what happened to every email: the Activity records of an account."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import peewee
from peewee import fn

from layang.clock import iso_ms
from layang.db import is_postgresql
from layang.domain.errors import NotFound
from layang.mail.message import Mailbox
from layang.models import (
    BOUNCE,
    DELAY,
    DELIVERY_STATES,
    INJECTION,
    SCHEDULED,
    TRANSACTIONAL,
    Account,
    Event,
    Recipient,
    Transmission,
    TransmissionTag,
)
from layang.pagination import Page, keyset_page

STORED = "stored"
EXPIRED = "expired"
"""Whether a record's message content is still kept, or retention removed it."""


@dataclass(frozen=True, slots=True)
class ActivityEvent:
    """One step of an email's life: a delivery state or an engagement, at ``timestamp_ms``
    (epoch ms). ``detail`` is what the step recorded (the upstream reply, the clicked URL…)."""

    status: str
    timestamp_ms: int
    detail: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ActivityRecord:
    """One email to one recipient. ``status`` is its current delivery state; ``events`` its
    timeline, oldest first, starting with the Injection. Timestamps are epoch ms.

    ``events`` is bounded (see ``EVENTS_PER_RECORD``); ``events_omitted`` says how many stored
    events were left out of it."""

    id: str
    transmission_id: str
    message_id: str
    recipient: str
    recipient_type: str
    sender: Mailbox
    subject: str
    status: str
    created_at: int
    updated_at: int
    metadata: dict[str, Any]
    events: tuple[ActivityEvent, ...]
    events_omitted: int = 0
    stream: str = TRANSACTIONAL
    content: str = STORED
    tags: tuple[str, ...] = ()

    @property
    def failure(self) -> ActivityEvent | None:
        """The event behind a Delay or Bounce status (its detail holds the upstream ``reply``
        and the ``bounceClass``), or None when the email is not failing."""
        if self.status not in FAILURE_STATES:
            return None
        return next((e for e in reversed(self.events) if e.status == self.status), None)


@dataclass(frozen=True, slots=True)
class TransmissionView:
    """A message as it was accepted, with every recipient's record in the order given."""

    id: str
    created_at: int
    source: str
    sender: Mailbox
    subject: str
    recipients: tuple[ActivityRecord, ...]
    scheduled_at: int | None = None


FAILURE_STATES = (DELAY, BOUNCE)


@dataclass(frozen=True, slots=True)
class ActivitySearch:
    """The console's looser filters, on top of ``list_activity``'s exact ones: substrings of
    the recipient address and of the subject (case-insensitive for ASCII), and one metadata
    ``key`` whose value, as text, equals ``value`` (a string as is, a number or boolean as its
    JSON text: ``42``, ``true``)."""

    recipient_contains: str = ""
    subject_contains: str = ""
    metadata: tuple[str, str] | None = None
    tag: str = ""


@dataclass(frozen=True, slots=True)
class ActivityWindow:
    """A page of records seen from either side: ``older_cursor`` continues past its oldest
    item, ``newer_cursor`` (for ``newer_than``) before its newest; None at either end."""

    items: tuple[ActivityRecord, ...]
    older_cursor: str | None
    newer_cursor: str | None


def _sender(transmission: Transmission) -> Mailbox:
    stored = json.loads(transmission.from_header)
    return Mailbox(stored["email"], stored.get("name"))


EVENTS_PER_RECORD = 100


@dataclass(slots=True)
class _Timeline:
    events: list[ActivityEvent] = field(default_factory=list)
    stored: int = 0


def _events_by_recipient(recipient_ids: Iterable[str]) -> dict[str, _Timeline]:
    """Each recipient's events, bounded: the newest ``EVENTS_PER_RECORD`` plus the first of
    each status (so the Delivery, the first Open… stay visible however long a record's life),
    oldest first, with the number stored. The cut is made by the database (window functions,
    in SQLite and PostgreSQL alike), so a record with a flood of events costs no more to read
    than one without."""
    grouped: dict[str, _Timeline] = defaultdict(_Timeline)
    ids = list(recipient_ids)
    if not ids:
        return grouped
    ranked = (
        Event.select(
            Event.id,
            Event.recipient,
            Event.status,
            Event.created_at,
            Event.detail,
            fn.ROW_NUMBER()
            .over(partition_by=[Event.recipient], order_by=[Event.id.desc()])
            .alias("newest"),
            fn.ROW_NUMBER()
            .over(partition_by=[Event.recipient, Event.status], order_by=[Event.id])
            .alias("nth_of_status"),
            fn.COUNT(Event.id).over(partition_by=[Event.recipient]).alias("stored"),
        )
        .where(Event.recipient.in_(ids))
        .alias("ranked")
    )
    query = (
        peewee.Select(
            [ranked],
            [
                ranked.c.recipient_id,
                ranked.c.status,
                ranked.c.created_at,
                ranked.c.detail,
                ranked.c.stored,
            ],
        )
        .where((ranked.c.newest <= EVENTS_PER_RECORD) | (ranked.c.nth_of_status == 1))
        .order_by(ranked.c.id)
        .bind(Event._meta.database)
        .tuples()
    )
    for recipient_id, status, created_at, detail, stored in query:
        timeline = grouped[recipient_id]
        timeline.events.append(ActivityEvent(status, created_at, json.loads(detail)))
        timeline.stored = stored
    return grouped


def _record(
    recipient: Recipient, transmission: Transmission, timeline: _Timeline
) -> ActivityRecord:
    # Injection is the record's creation, so it is not stored as an event row of its own:
    # one INSERT less on the intake path of every message.
    if transmission.scheduled_at is None:
        injection = ActivityEvent(INJECTION, recipient.created_at, {"source": transmission.source})
    else:
        # Its Injection is an event of its own, stored when the time came.
        detail = {"source": transmission.source, "scheduledAt": iso_ms(transmission.scheduled_at)}
        injection = ActivityEvent(SCHEDULED, recipient.created_at, detail)
    return ActivityRecord(
        id=recipient.id,
        transmission_id=transmission.id,
        message_id=transmission.message_id,
        recipient=recipient.address,
        recipient_type=recipient.recipient_type,
        sender=_sender(transmission),
        subject=transmission.subject,
        status=recipient.status,
        created_at=recipient.created_at,
        updated_at=recipient.updated_at,
        metadata=json.loads(
            transmission.metadata if recipient.metadata is None else recipient.metadata
        ),
        events=(injection, *timeline.events),
        events_omitted=timeline.stored - len(timeline.events),
        stream=transmission.stream,
        content=STORED if transmission.content_expired_at is None else EXPIRED,
        tags=tuple(json.loads(transmission.tags)) if transmission.tags else (),
    )


def _activity_query(
    account: Account,
    status: str | None,
    recipient: str | None,
    transmission_id: str | None,
    since: int | None,
    until: int | None,
    search: ActivitySearch | None = None,
) -> peewee.Select:
    query = (
        Recipient.select(Recipient, Transmission)
        .join(Transmission)
        .where(Recipient.account == account.id)
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
    if search is not None:
        if search.recipient_contains:
            query = query.where(Recipient.address.contains(search.recipient_contains))
        if search.subject_contains:
            query = query.where(Transmission.subject.contains(search.subject_contains))
        if search.metadata is not None:
            query = query.where(_metadata_equals(*search.metadata))
        if search.tag:
            tagged = TransmissionTag.select(TransmissionTag.transmission).where(
                (TransmissionTag.account == account.id) & (TransmissionTag.tag == search.tag)
            )
            query = query.where(Recipient.transmission.in_(tagged))
    return query


def _metadata_equals(key: str, value: str) -> peewee.Node:
    """The record's metadata (a JSON object in a text column: the recipient's own, else the
    transmission's) has ``key`` with ``value`` as text.
    Evaluated by the database: ``->>`` on PostgreSQL, ``json_each`` on SQLite (which spells
    booleans 1 and 0, so they are turned back into JSON's words)."""
    param = Transmission._meta.database.param
    if is_postgresql():
        return peewee.NodeList(
            (
                peewee.SQL("(CAST("),
                fn.COALESCE(Recipient.metadata, Transmission.metadata),
                peewee.SQL(f"AS jsonb) ->> {param}) = {param}", [key, value]),
            )
        )
    return peewee.NodeList(
        (
            peewee.SQL("EXISTS (SELECT 1 FROM json_each("),
            fn.COALESCE(Recipient.metadata, Transmission.metadata),
            peewee.SQL(
                f") AS kv WHERE kv.key = {param} AND CASE kv.type WHEN 'true' THEN 'true' "
                "WHEN 'false' THEN 'false' ELSE CAST(kv.value AS TEXT) END = "
                f"{param})",
                [key, value],
            ),
        )
    )


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
    recipient_contains: str = "",
    tag: str | None = None,
) -> Page[ActivityRecord]:
    """One page of the account's records, newest first.

    ``status`` is a delivery state (the record's current one) or ``Open``/``Click`` (records
    with such an event); ``recipient`` is an exact address (any case), ``recipient_contains``
    part of one; ``tag`` one of the message's tags (exact); ``since``/``until`` bound the
    creation time (epoch ms, inclusive).
    """
    search = None
    if recipient_contains or tag:
        search = ActivitySearch(recipient_contains=recipient_contains, tag=tag or "")
    query = _activity_query(account, status, recipient, transmission_id, since, until, search)
    page = keyset_page(query, Recipient.id, limit=limit, cursor=cursor)
    events = _events_by_recipient(r.id for r in page.items)
    return page.map(lambda r: _record(r, r.transmission, events[r.id]))


def browse_activity(
    account: Account,
    *,
    status: str | None = None,
    transmission_id: str | None = None,
    since: int | None = None,
    until: int | None = None,
    search: ActivitySearch | None = None,
    limit: int = 50,
    older_than: str | None = None,
    newer_than: str | None = None,
) -> ActivityWindow:
    """One page of the account's records, newest first, for reading back and forth: the
    records just older than the record id ``older_than``, or just newer than ``newer_than``
    (the first page without either). Filters as ``list_activity`` plus ``search``. Raises
    ``ValueError`` when ``limit`` is below 1."""
    query = _activity_query(account, status, None, transmission_id, since, until, search)
    if newer_than:
        page = keyset_page(query, Recipient.id, limit=limit, cursor=newer_than, descending=False)
        rows = page.items[::-1]
        # The record named by the cursor is older than this page, so an older page exists.
        older = rows[-1].id if rows else None
        newer = rows[0].id if rows and page.next_cursor else None
    else:
        page = keyset_page(query, Recipient.id, limit=limit, cursor=older_than)
        rows = page.items
        older = page.next_cursor
        newer = rows[0].id if rows and older_than else None
    events = _events_by_recipient(r.id for r in rows)
    items = tuple(_record(r, r.transmission, events[r.id]) for r in rows)
    return ActivityWindow(items, older, newer)


def get_transmission_view(account: Account, transmission_id: str) -> TransmissionView:
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
    return TransmissionView(
        id=transmission.id,
        created_at=transmission.created_at,
        source=transmission.source,
        sender=_sender(transmission),
        subject=transmission.subject,
        recipients=tuple(_record(r, transmission, events[r.id]) for r in recipients),
        scheduled_at=transmission.scheduled_at,
    )


def get_record(account: Account, record_id: str) -> ActivityRecord:
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
