"""The webhook outbox: events become deliveries, deliveries are claimed under a lease, and
each attempt's outcome is recorded.

Events are written by ``layang.mail.events`` in the transaction of the activity they
report. ``form_deliveries`` puts waiting events into deliveries of up to ``EVENTS_PER_DELIVERY``
per endpoint, each with its body fixed, so that every retry sends the same bytes under the same
``webhook-id``. An event waits while an earlier event of the same recipient for the same
endpoint is in a delivery still pending: a recipient's events reach an endpoint in order, as
long as their deliveries succeed (one that finally fails lets the later ones go).

Deliveries are claimed as outbox mail is (``FOR UPDATE SKIP LOCKED`` on PostgreSQL, the write
lock on SQLite), held under a lease that the dispatcher renews, and taken over by another
dispatcher when a dead one's lease runs out: at least once, and exactly once while dispatchers
live.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from layang.clock import iso_ms, now_ms
from layang.db import database, is_postgresql, new_id, write_transaction
from layang.models import (
    WEBHOOK_DELIVERED,
    WEBHOOK_FAILED,
    WEBHOOK_PENDING,
    WebhookAttempt,
    WebhookDelivery,
)
from layang.queueing.leases import LeasedTable
from layang.queueing.retry import RetryPolicy

EVENTS_PER_DELIVERY = 100
# Events put into deliveries by one dispatcher in one go.
FORM_LIMIT = 300
# An endpoint whose attempts have failed for this long, with no success since, is disabled.
DISABLE_AFTER_MS = 5 * 24 * 3600 * 1000
# Forming deliveries is serialised across processes on PostgreSQL (SQLite's write lock does it
# there): the order rule above reads what another former has not committed yet.
_FORM_LOCK = 7412


def _param() -> str:
    return database.obj.param


def _sql(text: str) -> str:
    return text.replace("?", _param())


def has_waiting_events() -> bool:
    """Whether any event can be put into a delivery now (a read, so that an idle dispatcher,
    or one whose events all wait behind a retry, never takes the write lock)."""
    cursor = database.execute_sql(_sql(_WAITING_SQL), (1,))
    return cursor.fetchone() is not None


_WAITING_SQL = """
SELECT e."id", e."endpoint_id", e."recipient_id" FROM "webhook_event" e
JOIN "webhook_endpoint" w ON w."id" = e."endpoint_id"
WHERE e."delivery_id" IS NULL AND w."disabled_at" IS NULL
AND NOT EXISTS (
    SELECT 1 FROM "webhook_event" o JOIN "webhook_delivery" d ON d."id" = o."delivery_id"
    WHERE o."endpoint_id" = e."endpoint_id" AND o."recipient_id" = e."recipient_id"
    AND d."status" = 'pending')
ORDER BY e."id" LIMIT ?
"""

_EVENTS_SQL = """
SELECT e."id", e."event_id", e."status", e."created_at", e."detail", r."transmission_id",
    r."address", r."recipient_type", t."message_id", t."from_header", t."subject", t."metadata",
    t."stream"
FROM "webhook_event" e
LEFT JOIN "recipient" r ON r."id" = e."recipient_id"
LEFT JOIN "transmission" t ON t."id" = r."transmission_id"
WHERE e."id" IN ({marks})
ORDER BY e."id"
"""


def form_deliveries(limit: int = FORM_LIMIT) -> int:
    """Put up to ``limit`` waiting events into deliveries due now; returns how many events."""
    with write_transaction():
        if is_postgresql():
            cursor = database.execute_sql("SELECT pg_try_advisory_xact_lock(%s)", (_FORM_LOCK,))
            if not cursor.fetchone()[0]:
                return 0  # another dispatcher is at it
        waiting = database.execute_sql(_sql(_WAITING_SQL), (limit,)).fetchall()
        if not waiting:
            return 0
        marks = ", ".join([_param()] * len(waiting))
        rows = database.execute_sql(
            _EVENTS_SQL.format(marks=marks), [row[0] for row in waiting]
        ).fetchall()
        by_id = {row[0]: row for row in rows}
        now = now_ms()
        formed = 0
        for endpoint_id, chunks in _chunks(waiting).items():
            for chunk in chunks:
                formed += len(chunk)
                _insert_delivery(endpoint_id, [by_id[event_id] for event_id in chunk], now)
    return formed


def _chunks(waiting: Sequence[tuple[int, str, str | None]]) -> dict[str, list[list[int]]]:
    """Waiting event ids by endpoint, cut into deliveries. An event whose recipient already
    has an event in an earlier delivery of this endpoint waits for a later round, so that two
    deliveries formed together never carry one recipient's events."""
    chunks: dict[str, list[list[int]]] = {}
    closed: dict[str, set[str]] = {}
    current: dict[str, set[str]] = {}
    for event_id, endpoint_id, recipient_id in waiting:
        mine = chunks.setdefault(endpoint_id, [[]])
        if recipient_id is not None and recipient_id in closed.setdefault(endpoint_id, set()):
            continue
        if len(mine[-1]) == EVENTS_PER_DELIVERY:
            closed[endpoint_id] |= current.pop(endpoint_id, set())
            if recipient_id is not None and recipient_id in closed[endpoint_id]:
                continue
            mine.append([])
        mine[-1].append(event_id)
        if recipient_id is not None:
            current.setdefault(endpoint_id, set()).add(recipient_id)
    return chunks


def _insert_delivery(endpoint_id: str, events: Sequence[Sequence[Any]], now: int) -> None:
    delivery_id = new_id()
    payload = [_event_json(row) for row in events]
    WebhookDelivery.insert(
        id=delivery_id,
        endpoint=endpoint_id,
        event_ids=json.dumps([event["id"] for event in payload]),
        body=json.dumps({"type": "layang.events", "events": payload}, separators=(",", ":")),
        status=WEBHOOK_PENDING,
        attempts=0,
        created_at=now,
        next_attempt_at=now,
    ).execute()
    marks = ", ".join([_param()] * len(events))
    database.execute_sql(
        f'UPDATE "webhook_event" SET "delivery_id" = {_param()} WHERE "id" IN ({marks})',
        [delivery_id, *(row[0] for row in events)],
    )


def _event_json(row: Sequence[Any]) -> dict[str, Any]:
    (
        _,
        event_id,
        status,
        created_at,
        detail,
        transmission_id,
        address,
        recipient_type,
        message_id,
        from_header,
        subject,
        metadata,
        stream,
    ) = row
    detail_value = json.loads(detail) if detail else {}
    event: dict[str, Any] = {
        "id": event_id,
        "type": status,
        "timestamp": iso_ms(created_at),
        "transmissionId": transmission_id,
        "messageId": message_id,
        "recipient": address,
        "recipientType": recipient_type,
        "from": json.loads(from_header) if from_header else None,
        "subject": subject,
        "metadata": json.loads(metadata) if metadata else {},
        "detail": detail_value,
    }
    if isinstance(detail_value, dict) and "bounceClass" in detail_value:
        event["bounceClass"] = detail_value["bounceClass"]
    if stream is not None:
        event["stream"] = stream
    return event


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    """A delivery a dispatcher holds under lease: what it needs to send and record it."""

    id: str
    endpoint_id: str
    body: str
    attempts: int


def has_due_deliveries() -> bool:
    """Whether a delivery is due and free (one index probe and a few rows)."""
    now = now_ms()
    cursor = database.execute_sql(
        _sql(
            'SELECT 1 FROM "webhook_delivery" WHERE "next_attempt_at" <= ? '
            'AND ("lease_expires_at" IS NULL OR "lease_expires_at" < ?) LIMIT 1'
        ),
        (now, now),
    )
    return cursor.fetchone() is not None


DELIVERIES = LeasedTable(
    "webhook_delivery",
    returning=("id", "endpoint_id", "body", "attempts"),
    eligible='"endpoint_id" IN (SELECT "id" FROM "webhook_endpoint" WHERE "disabled_at" IS NULL)',
)


def claim_deliveries(owner: str, limit: int, lease_seconds: float) -> list[ClaimedDelivery]:
    """Lease up to ``limit`` due deliveries of enabled endpoints to ``owner``."""
    return [ClaimedDelivery(*row) for row in DELIVERIES.claim(owner, limit, lease_seconds)]


_RECORD_SQL = (
    'UPDATE "webhook_delivery" SET "status" = ?, "attempts" = ?, "next_attempt_at" = ?, '
    '"lease_owner" = NULL, "lease_expires_at" = NULL WHERE "id" = ? AND "lease_owner" = ?'
)
_FAILING_SQL = (
    'UPDATE "webhook_endpoint" SET "failing_since" = ? WHERE "id" = ? AND "failing_since" IS NULL'
)
_DISABLE_SQL = (
    'UPDATE "webhook_endpoint" SET "disabled_at" = ?, "disabled_reason" = ? WHERE "id" = ? '
    'AND "disabled_at" IS NULL AND "failing_since" <= ?'
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One attempt of one delivery: the answer's status (None when none came) and the error."""

    delivery: ClaimedDelivery
    ok: bool
    response_status: int | None
    error: str | None


def record_outcomes(owner: str, outcomes: Iterable[Outcome], policy: RetryPolicy) -> int:
    """Record each attempt, in one transaction, for the deliveries ``owner`` still holds: the
    delivery's new state, an attempt row, the endpoint's failing streak (an endpoint failing for
    five days with no success is disabled). Returns how many were recorded."""
    now = now_ms()
    recorded = 0
    with write_transaction():
        for outcome in outcomes:
            delivery = outcome.delivery
            attempts = delivery.attempts + 1
            if outcome.ok:
                status, following = WEBHOOK_DELIVERED, None
            else:
                following = policy.next_attempt(attempts, now, now)
                status = WEBHOOK_PENDING if following is not None else WEBHOOK_FAILED
            cursor = database.execute_sql(
                _sql(_RECORD_SQL),
                (status, attempts, following, delivery.id, owner),
            )
            if cursor.rowcount != 1:
                continue  # the lease was lost: the new holder records its own attempt
            recorded += 1
            WebhookAttempt.insert(
                id=new_id(),
                delivery=delivery.id,
                endpoint=delivery.endpoint_id,
                attempted_at=now,
                status=status,
                response_status=outcome.response_status,
                error=outcome.error,
                next_attempt_at=following,
            ).execute()
            if outcome.ok:
                database.execute_sql(
                    _sql('UPDATE "webhook_endpoint" SET "failing_since" = NULL WHERE "id" = ?'),
                    (delivery.endpoint_id,),
                )
                continue
            database.execute_sql(
                _sql(_FAILING_SQL),
                (now, delivery.endpoint_id),
            )
            database.execute_sql(
                _sql(_DISABLE_SQL),
                (
                    now,
                    "Every delivery attempt failed for 5 days.",
                    delivery.endpoint_id,
                    now - DISABLE_AFTER_MS,
                ),
            )
    return recorded
