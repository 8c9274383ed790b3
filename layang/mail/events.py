"""Activity events: the one place they are written.

Every step of an email's life that Activity shows (a delivery attempt's outcome, an open, a
click, a bounce report…) is stored through ``append_events``, inside the write transaction that
changes the recipient's record, so that whatever follows from an event is written with it or
not at all: here, one webhook outbox row per enabled endpoint of the recipient's account that
subscribes to the event's type, the suppressions it calls for, and the circuit breaker's
counters (``layang.mail.reputation``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from layang.db import Batch, Statement, insert_batches, is_postgresql
from layang.ids import new_id
from layang.mail.reputation import counter_statements
from layang.mail.suppression import suppressions_from
from layang.models import INJECTION, Event

EVENT_FIELDS = ("recipient", "status", "created_at", "detail")

# (recipient id, status, epoch ms, detail as JSON)
EventRow = tuple[str, str, int, str]


def event_batches(rows: Sequence[EventRow]) -> list[Batch]:
    """The inserts that store ``rows`` and what follows from them, for ``insert_atomically``
    (the intake path, which commits its rows in one go)."""
    if not rows:
        return []
    batches: list[Batch] = [_webhook_rows(rows)]
    # A hard bounce, a complaint or an unsubscribe puts the address on the suppression list.
    suppressions = suppressions_from(rows)
    if suppressions is not None:
        batches.append(suppressions)
    # The circuit breaker's counters move with the events they count. They, and the
    # overview's counts that the event rows' trigger keeps, are rows every worker updates:
    # written last, they are held locked only until the commit that follows.
    batches.extend(counter_statements(rows))
    batches.append((Event, EVENT_FIELDS, rows))
    return batches


def injection_batches(account_id: int, recipient_ids: Sequence[str], at: int) -> list[Batch]:
    """What follows from the Injection of ``recipient_ids`` (rows inserted before these
    batches): an Injection has no Event row (the recipient's record stands for it), but it
    reaches webhooks like any other event."""
    if not recipient_ids:
        return []
    ids = _event_ids(len(recipient_ids))
    rows = [(eid, rid, INJECTION, at, "{}") for eid, rid in zip(ids, recipient_ids, strict=True)]
    sql = _injection_sql(len(rows), is_postgresql())
    return [Statement(sql, [value for row in rows for value in row] + [account_id])]


def append_events(rows: Sequence[EventRow]) -> None:
    """Store ``rows`` as activity events. Call it inside an open write transaction."""
    insert_batches(event_batches(rows))


def _event_ids(count: int) -> list[str]:
    """``count`` unique public event ids: one ``new_id`` and a counter. A ``new_id`` for each
    cost more than the statement that stores the rows (~11 µs, on every event of the mail
    path, whether or not anyone subscribes)."""
    base = new_id()
    return [f"{base}{n:04x}" for n in range(count)]


def _webhook_rows(rows: Sequence[EventRow]) -> Statement:
    ids = _event_ids(len(rows))
    params = [value for eid, row in zip(ids, rows, strict=True) for value in (eid, *row)]
    return Statement(_event_sql(len(rows), is_postgresql()), params)


def _subscribed(postgresql: bool) -> str:
    """An endpoint subscribes to a type when its ``events`` is "*" or holds ",<type>,"."""
    # psycopg2 reads % as its placeholder sign: a literal one is doubled there.
    percent = "%%" if postgresql else "%"
    return (
        'w."disabled_at" IS NULL '
        f"""AND (w."events" = '*' OR w."events" LIKE '{percent},' || v."status" || ',{percent}')"""
    )


_OUTBOX_COLUMNS = (
    'INSERT INTO "webhook_event" '
    '("event_id", "recipient_id", "status", "created_at", "detail", "endpoint_id") '
    'SELECT v."event_id", v."recipient_id", v."status", v."created_at", v."detail", w."id" '
)


def _values(rows: int, postgresql: bool) -> str:
    row = "(?, ?, ?, ?::bigint, ?)" if postgresql else "(?, ?, ?, ?, ?)"
    return (
        'WITH v("event_id", "recipient_id", "status", "created_at", "detail") AS '
        f"(VALUES {', '.join([row] * rows)}) "
    )


@functools.lru_cache(maxsize=128)
def _event_sql(rows: int, postgresql: bool) -> str:
    return (
        _values(rows, postgresql)
        + _OUTBOX_COLUMNS
        + 'FROM v JOIN "recipient" r ON r."id" = v."recipient_id" '
        'JOIN "webhook_endpoint" w ON w."account_id" = r."account_id" '
        f"WHERE {_subscribed(postgresql)}"
    )


@functools.lru_cache(maxsize=128)
def _injection_sql(rows: int, postgresql: bool) -> str:
    return (
        _values(rows, postgresql)
        + _OUTBOX_COLUMNS
        + 'FROM "webhook_endpoint" w, v '
        + f'WHERE w."account_id" = ? AND {_subscribed(postgresql)}'
    )
