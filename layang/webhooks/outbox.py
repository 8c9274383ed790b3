"""The webhook outbox: events become deliveries, deliveries are claimed under a lease, and
each attempt's outcome is recorded.

Events are written by ``layang.mail.events`` in the transaction of the activity they
report. ``form_deliveries`` puts waiting events into deliveries of up to ``EVENTS_PER_DELIVERY``
per endpoint, each with its body fixed, so that every retry sends the same bytes under the same
``webhook-id``. An event waits while an earlier event of the same recipient for the same
endpoint is in a delivery still pending: a recipient's events reach an endpoint in order, as
long as their deliveries succeed (one that finally fails lets the later ones go).

An inbound route's endpoint (``kind`` 'inbound') gets its deliveries one at a time, oldest
first: a delivery is claimed only once every older one of its endpoint is delivered or failed,
so a route's messages arrive in the order they were received.

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
from layang.db import database, is_postgresql, write_transaction
from layang.ids import new_id
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
    r."address", r."recipient_type", t."message_id", t."from_header", t."subject",
    coalesce(r."metadata", t."metadata"), t."stream", t."tags"
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
        tags,
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
        "tags": json.loads(tags) if tags else [],
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


# At most this many requests in flight to one endpoint, across every dispatcher.
ENDPOINT_IN_FLIGHT = 2
# At most this many requests in flight for one account's endpoints, across every dispatcher:
# an account with many slow endpoints leaves room for the others.
ACCOUNT_IN_FLIGHT = 16
# Candidates a claim looks at: the oldest due deliveries of each endpoint, up to this many.
CANDIDATES = 1000
# Claims are serialised across processes on PostgreSQL (SQLite's write lock does it there), so
# that two dispatchers never start a third request to one endpoint between them.
_CLAIM_LOCK = 7413


CHANNEL = "layang_webhooks"
"""The PostgreSQL channel a trigger notifies when webhook events or deliveries are stored."""


def next_due_ms() -> int | None:
    """When the next delivery falls due (epoch ms), or None if none waits."""
    row = database.execute_sql(
        'SELECT MIN("next_attempt_at") FROM "webhook_delivery" WHERE "next_attempt_at" IS NOT NULL'
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


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


DELIVERIES = LeasedTable("webhook_delivery", returning=("id", "endpoint_id", "body", "attempts"))

_CANDIDATES_SQL = f"""
SELECT "id", "endpoint_id", "account_id" FROM (
    SELECT d."id", d."endpoint_id", w."account_id", d."next_attempt_at",
        ROW_NUMBER() OVER (PARTITION BY d."endpoint_id" ORDER BY d."next_attempt_at") AS "n"
    FROM "webhook_delivery" d JOIN "webhook_endpoint" w ON w."id" = d."endpoint_id"
    WHERE d."next_attempt_at" <= ? AND (d."lease_expires_at" IS NULL OR d."lease_expires_at" < ?)
    AND w."disabled_at" IS NULL
    AND (w."kind" = 'events' OR NOT EXISTS (
        SELECT 1 FROM "webhook_delivery" p WHERE p."endpoint_id" = d."endpoint_id"
        AND p."status" = 'pending' AND p."id" < d."id"))
) due WHERE "n" <= {ENDPOINT_IN_FLIGHT} ORDER BY "next_attempt_at" LIMIT {CANDIDATES}
"""

_IN_FLIGHT_SQL = """
SELECT d."endpoint_id", w."account_id", COUNT(*) FROM "webhook_delivery" d
JOIN "webhook_endpoint" w ON w."id" = d."endpoint_id"
WHERE d."next_attempt_at" IS NOT NULL AND d."lease_expires_at" >= ?
GROUP BY d."endpoint_id", w."account_id"
"""


def claim_deliveries(owner: str, limit: int, lease_seconds: float) -> list[ClaimedDelivery]:
    """Lease up to ``limit`` due deliveries of enabled endpoints to ``owner``, fairly: taken in
    turn from each account (oldest first) and each of its endpoints, never more than
    ``ENDPOINT_IN_FLIGHT`` requests in flight to an endpoint nor ``ACCOUNT_IN_FLIGHT`` for an
    account, counting every dispatcher's. The choice is made once without a lock, so that a
    dispatcher with nothing it may take never takes the write lock, then again under it."""
    if limit <= 0 or not _fair_choice(limit):
        return []
    with write_transaction(durable=False):
        if is_postgresql():
            database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_CLAIM_LOCK,))
        chosen = _fair_choice(limit)
        rows = DELIVERIES.claim_chosen(owner, chosen, lease_seconds)
    return [ClaimedDelivery(*row) for row in rows]


def _fair_choice(limit: int) -> list[str]:
    now = now_ms()
    candidates = database.execute_sql(_sql(_CANDIDATES_SQL), (now, now)).fetchall()
    if not candidates:
        return []
    by_endpoint: dict[str, int] = {}
    by_account: dict[int, int] = {}
    for endpoint_id, account_id, count in database.execute_sql(
        _sql(_IN_FLIGHT_SQL), (now,)
    ).fetchall():
        by_endpoint[endpoint_id] = count
        by_account[account_id] = by_account.get(account_id, 0) + count
    # Each account's due deliveries, its endpoints taking turns; accounts in order of their
    # oldest, then one delivery from each account per pass.
    queues: dict[int, dict[str, list[str]]] = {}
    for delivery_id, endpoint_id, account_id in candidates:
        queues.setdefault(account_id, {}).setdefault(endpoint_id, []).append(delivery_id)
    turns = {account: _interleave(endpoints) for account, endpoints in queues.items()}
    chosen: list[str] = []
    while turns and len(chosen) < limit:
        for account in list(turns):
            taken = False
            while turns[account] and not taken:
                endpoint_id, delivery_id = turns[account].pop(0)
                if by_account.get(account, 0) >= ACCOUNT_IN_FLIGHT:
                    turns[account].clear()
                elif by_endpoint.get(endpoint_id, 0) < ENDPOINT_IN_FLIGHT:
                    by_endpoint[endpoint_id] = by_endpoint.get(endpoint_id, 0) + 1
                    by_account[account] = by_account.get(account, 0) + 1
                    chosen.append(delivery_id)
                    taken = True
            if not turns[account]:
                del turns[account]
            if len(chosen) == limit:
                break
    return chosen


def _interleave(endpoints: dict[str, list[str]]) -> list[tuple[str, str]]:
    """(endpoint, delivery) pairs taking one delivery of each endpoint in turn."""
    rounds = max(len(ids) for ids in endpoints.values())
    return [
        (endpoint_id, ids[n])
        for n in range(rounds)
        for endpoint_id, ids in endpoints.items()
        if n < len(ids)
    ]


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
