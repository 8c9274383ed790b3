"""The worker's side of the outbox: claiming due recipients, reading their messages, and
recording each attempt's outcome with its events.

Outcomes are recorded only for the recipients the worker still holds (its lease), in one
transaction per batch: one UPDATE for all the recipients and one INSERT for all their events,
with what follows from the events (webhook rows, suppressions; see ``layang.mail.events``).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from layang.clock import iso_ms, now_ms
from layang.db import database, is_postgresql, write_transaction
from layang.delivery import simulator
from layang.delivery.outcomes import BOUNCED, DEFERRED, DELIVERED, RecipientResult
from layang.mail.bounce_class import classify
from layang.mail.events import append_events
from layang.mail.message import REQUIRETLS, OutgoingMessage
from layang.mail.suppression import suppressed_event_detail
from layang.models import (
    BOUNCE,
    COMPLAINT,
    DELAY,
    DELIVERY,
    FINAL_STATES,
    STREAM_PRIORITY,
    SUPPRESSED,
    Recipient,
)
from layang.queueing.leases import LeasedTable
from layang.queueing.retry import RetryPolicy

log = logging.getLogger("layang.outbox")

RECIPIENTS = LeasedTable(
    "recipient",
    returning=(
        "id",
        "transmission_id",
        "address",
        "attempts",
        "created_at",
        "next_attempt_at",
        "priority",
    ),
    # Transactional mail (priority 0) first when both streams wait (contract 17).
    order='"priority", "next_attempt_at"',
    # A record's priority is its stream's, one of these.
    every_row=f'"priority" IN ({", ".join(str(p) for p in sorted(STREAM_PRIORITY.values()))})',
)


@dataclass(frozen=True, slots=True)
class ClaimedRecipient:
    """One email a worker holds under lease: what it needs to send and record it."""

    id: str
    transmission_id: str
    address: str
    attempts: int
    created_at: int


@dataclass(frozen=True, slots=True)
class QueuedTransmission:
    """What the worker needs of a transmission to relay it: the stored message (``payload``)
    or its finished bytes (``raw``)."""

    id: str
    mail_from: str
    message_id: str
    payload: str | None
    raw: bytes | None
    account_id: int = 0
    from_header: str = ""
    tls_requirement: str | None = None

    @property
    def require_tls(self) -> bool:
        """Whether the message was sent with REQUIRETLS (RFC 8689): verified TLS to servers
        that advertise REQUIRETLS, or a bounce (``550 5.7.30``)."""
        return self.tls_requirement == REQUIRETLS

    stream: str = "transactional"
    stored_from_domain: str = ""
    """The From domain as intake stored it ('' in rows stored before it was kept)."""
    personalized: bool = False
    """Whether some recipients have content of their own (see :func:`personal_contents`)."""

    @property
    def is_transactional(self) -> bool:
        """Whether the message is transactional (see ``OutgoingMessage.is_transactional``);
        an SMTP submission is unless its X-Layang-Stream said broadcast."""
        if self.payload is None:
            return self.stream != "broadcast"
        return OutgoingMessage.from_payload(json.loads(self.payload)).is_transactional

    @property
    def from_domain(self) -> str:
        """The domain of the From header (the address DKIM aligns with), lower-cased."""
        if self.stored_from_domain:
            return self.stored_from_domain
        try:
            address = json.loads(self.from_header)["email"]
        except (ValueError, KeyError, TypeError):
            address = self.mail_from
        return address.rpartition("@")[2].rstrip(".").lower()


def claim_due_recipients(owner: str, limit: int, lease_seconds: float) -> list[ClaimedRecipient]:
    """Lease up to ``limit`` due recipients to ``owner`` and return them, transactional before
    broadcast, oldest due first."""
    rows = RECIPIENTS.claim(owner, limit, lease_seconds)
    rows.sort(key=lambda row: (row[6], row[5], row[0]))
    return [ClaimedRecipient(*row[:5]) for row in rows]


def claim_due_recipients_besides(
    owner: str,
    accounts: Iterable[int],
    limit: int,
    lease_seconds: float,
    *,
    excluding: Collection[str] = (),
) -> list[ClaimedRecipient]:
    """As :func:`claim_due_recipients`, of accounts other than ``accounts`` only (the mail
    of those that wait while ``accounts`` have the worker's sessions busy), and never the
    recipients ``excluding`` (ids this worker gave back a moment ago, for another to take)."""
    now = now_ms()
    condition = (Recipient.next_attempt_at <= now) & (
        Recipient.lease_expires_at.is_null() | (Recipient.lease_expires_at < now)
    )
    if is_postgresql():  # as RECIPIENTS.every_row: read only due records of the index
        condition &= Recipient.priority.in_(sorted(STREAM_PRIORITY.values()))
    if accounts:
        condition &= Recipient.account.not_in(sorted(accounts))
    if excluding:
        condition &= Recipient.id.not_in(sorted(excluding))
    chosen = (
        Recipient.select(Recipient.id)
        .where(condition)
        .order_by(Recipient.priority, Recipient.next_attempt_at)
        .limit(limit)
    )
    rows = RECIPIENTS.claim_chosen(owner, [row[0] for row in chosen.tuples()], lease_seconds)
    rows.sort(key=lambda row: (row[6], row[5], row[0]))
    return [ClaimedRecipient(*row[:5]) for row in rows]


def load_transmissions(ids: Sequence[str]) -> dict[str, QueuedTransmission]:
    """The transmissions ``ids``, by id; a large message's payload put together from its
    chunks (see ``layang.mail.outbox.StoredPayload``) unless its bytes are kept already."""
    if not ids:
        return {}
    marks = ", ".join([database.obj.param] * len(ids))
    cursor = database.execute_sql(
        'SELECT "id", "mail_from", "message_id", "payload", "raw", "account_id", "from_header", '
        '"tls_requirement", "stream", "from_domain", "personalized" '
        f'FROM "transmission" WHERE "id" IN ({marks})',
        list(ids),
    )
    rows = cursor.fetchall()
    chunked = _chunked_payloads([row[0] for row in rows if row[3] is None and row[4] is None])
    return {
        row[0]: QueuedTransmission(
            row[0],
            row[1],
            row[2],
            chunked.get(row[0]) if row[3] is None else row[3],
            None if row[4] is None else bytes(row[4]),
            *row[5:10],
            bool(row[10]),
        )
        for row in rows
    }


def personal_contents(recipient_ids: Sequence[str]) -> dict[str, str]:
    """The stored content of those of ``recipient_ids`` that have their own (JSON, see
    ``layang.mail.outbox.PersonalContent``), by recipient id."""
    if not recipient_ids:
        return {}
    marks = ", ".join([database.obj.param] * len(recipient_ids))
    cursor = database.execute_sql(
        f'SELECT "id", "content" FROM "recipient" WHERE "id" IN ({marks}) '
        'AND "content" IS NOT NULL',
        list(recipient_ids),
    )
    return dict(cursor.fetchall())


def _chunked_payloads(ids: Sequence[str]) -> dict[str, str]:
    """The payloads stored in chunks of those of ``ids`` that have any, by transmission id."""
    if not ids:
        return {}
    marks = ", ".join([database.obj.param] * len(ids))
    cursor = database.execute_sql(
        'SELECT "transmission_id", "text" FROM "payload_chunk" '
        f'WHERE "transmission_id" IN ({marks}) ORDER BY "transmission_id", "seq"',
        list(ids),
    )
    chunks: dict[str, list[str]] = {}
    for transmission_id, text in cursor:
        chunks.setdefault(transmission_id, []).append(text)
    return {tid: "".join(chunks.pop(tid)) for tid in list(chunks)}


@dataclass(frozen=True)
class Attempt:
    """The outcome of one delivery attempt of one copy of a message.

    ``built`` is (transmission id, message bytes) when the message was built for this attempt:
    it is kept if any recipient will be retried, so that retries send the very same bytes
    without building them again.
    """

    recipients: Sequence[ClaimedRecipient]
    results: dict[str, RecipientResult]
    built: tuple[str, bytes] | None = None
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    """More for each recipient's event detail (``host``, ``address``, ``tls``, ``durationMs``)."""
    sender: tuple[int, str] | None = None
    """(account id, From domain) of the message, when known: the circuit breakers its outcome
    counts for (``layang.mail.breaker_levels.judge_recorded``)."""


def record_attempts(owner: str, attempts: Sequence[Attempt], policy: RetryPolicy) -> dict[str, str]:
    """Store, in one transaction, the outcome of each attempt for every recipient ``owner``
    still holds: one UPDATE for all the recipients and one INSERT for all their events.

    Returns recipient id → the status recorded. A recipient whose lease was lost to another
    worker is left to that worker (delivery is at-least-once).
    """
    now = now_ms()
    outcomes: list[tuple[str, str, int, int | None]] = []
    details: dict[str, tuple[str, str]] = {}
    complaining: set[str] = set()
    keep: list[tuple[bytes, str]] = []
    for attempt in attempts:
        if attempt.built and any(r.outcome == DEFERRED for r in attempt.results.values()):
            keep.append((attempt.built[1], attempt.built[0]))
        for recipient in attempt.recipients:
            status, next_attempt, detail = _outcome(
                recipient,
                attempt.results[recipient.address],
                policy,
                now,
                attempt.details.get(recipient.address),
            )
            outcomes.append((recipient.id, status, recipient.attempts + 1, next_attempt))
            details[recipient.id] = (status, detail)
            if status == DELIVERY and simulator.complains(recipient.address):
                complaining.add(recipient.id)
    if not outcomes:
        return {}
    postgresql = is_postgresql()
    param = database.obj.param
    with write_transaction():
        for raw, transmission_id in keep:
            database.execute_sql(_KEEP_RAW_SQL.replace("?", param), (raw, transmission_id))
        cursor = database.execute_sql(
            _record_sql(param, postgresql, len(outcomes)),
            [now, *(value for row in outcomes for value in row), owner],
        )
        updated = {row[0] for row in cursor.fetchall()}
        events = [
            (rid, status, now, detail)
            for rid, (status, detail) in details.items()
            if rid in updated
        ]
        # A simulator complaint follows its delivery, as a feedback report would.
        complaint = json.dumps(simulator.COMPLAINT_DETAIL)
        events += [(rid, COMPLAINT, now + 1, complaint) for rid in complaining & updated]
        append_events(events)
    for attempt in attempts:
        for recipient in attempt.recipients:
            if recipient.id not in updated:
                log.warning("lease lost tid=%s rid=%s", recipient.transmission_id, recipient.id)
    return {rid: details[rid][0] for rid in updated}


def record_suppressed(owner: str, stopped: Sequence[tuple[ClaimedRecipient, str]]) -> set[str]:
    """Record each (recipient, reason) of ``stopped`` as ``Suppressed``, never to be sent,
    where ``owner`` still holds it: its address went on the suppression list while it waited
    in the queue. Returns the ids recorded."""
    if not stopped:
        return set()
    now = now_ms()
    param = database.obj.param
    with write_transaction():
        cursor = database.execute_sql(
            _record_sql(param, is_postgresql(), len(stopped)),
            [now, *(v for r, _ in stopped for v in (r.id, SUPPRESSED, r.attempts, None)), owner],
        )
        updated = {row[0] for row in cursor.fetchall()}
        append_events(
            [
                (r.id, SUPPRESSED, now, suppressed_event_detail(reason))
                for r, reason in stopped
                if r.id in updated
            ]
        )
    for recipient, reason in stopped:
        if recipient.id in updated:
            log.info(
                "suppressed tid=%s rid=%s reason=%s",
                recipient.transmission_id,
                recipient.id,
                reason,
            )
    return updated


def record_waiting(
    owner: str,
    recipients: Sequence[ClaimedRecipient],
    site: str,
    until_ms: int | None,
    reason: str,
) -> int:
    """Hand ``recipients`` (where ``owner`` still holds them) back to the queue to wait on
    ``site`` until ``until_ms`` (None: suspended until resumed; looked at again every
    ``WAIT_RECHECK_MS``), without charging them an attempt. Those not already waiting on that
    site become ``Delay`` with an event naming the reason: once per wait, however often the
    site is found closed. Returns how many got that event."""
    if not recipients:
        return 0
    now = now_ms()
    until = max(until_ms or now + WAIT_RECHECK_MS, now)
    ids = [r.id for r in recipients]
    attempts = {r.id: r.attempts for r in recipients}
    param = database.obj.param
    marks = ", ".join([param] * len(ids))
    with write_transaction():
        cursor = database.execute_sql(
            f'SELECT "id" FROM "recipient" WHERE "id" IN ({marks}) AND "lease_owner" = {param} '
            f'AND ("waiting_on" IS NULL OR "waiting_on" <> {param})',
            [*ids, owner, site],
        )
        fresh = [row[0] for row in cursor.fetchall()]
        database.execute_sql(
            f'UPDATE "recipient" SET "waiting_on" = {param}, "next_attempt_at" = {param}, '
            f'"lease_owner" = NULL, "lease_expires_at" = NULL, "updated_at" = {param} '
            f'WHERE "id" IN ({marks}) AND "lease_owner" = {param}',
            [site, until, now, *ids, owner],
        )
        if fresh:
            fresh_marks = ", ".join([param] * len(fresh))
            database.execute_sql(
                f'UPDATE "recipient" SET "status" = {param} WHERE "id" IN ({fresh_marks})',
                [DELAY, *fresh],
            )
            detail = {"reply": reason, "code": 0, "site": site, "retryAt": iso_ms(until)}
            append_events(
                [
                    (rid, DELAY, now, json.dumps({**detail, "attempt": attempts[rid]}))
                    for rid in fresh
                ]
            )
    return len(fresh)


WAIT_RECHECK_MS = 300_000
"""Mail waiting on a site suspended without an end is looked at again this often."""

_KEEP_RAW_SQL = 'UPDATE "transmission" SET "raw" = ? WHERE "id" = ? AND "raw" IS NULL'


def _outcome(
    recipient: ClaimedRecipient,
    result: RecipientResult,
    policy: RetryPolicy,
    now: int,
    more: dict[str, Any] | None = None,
) -> tuple[str, int | None, str]:
    """(status, next attempt or None, event detail as JSON) for one recipient's result."""
    attempts = recipient.attempts + 1
    detail: dict[str, Any] = {"reply": result.reply, "code": result.code, "attempt": attempts}
    detail.update(more or {})
    next_attempt = None
    if result.outcome == DELIVERED:
        status = DELIVERY
    elif result.outcome == BOUNCED:
        status = BOUNCE
        detail["bounceClass"] = classify(result.code, result.reply)
    else:
        detail["bounceClass"] = classify(result.code, result.reply)
        next_attempt = policy.next_attempt(attempts, recipient.created_at, now)
        if next_attempt is None:
            status = BOUNCE
            detail["reason"] = "expired"
        else:
            status = DELAY
            detail["retryAt"] = iso_ms(next_attempt)
    return status, next_attempt, json.dumps(detail)


@functools.lru_cache(maxsize=64)
def _record_sql(param: str, postgresql: bool, rows: int) -> str:
    """One UPDATE of ``rows`` recipients from a VALUES list, only where the lease is still
    held, returning the ids it updated. A record already in a final state keeps it (its
    events are still added, each at its own time)."""
    if postgresql:
        row = f"({param}, {param}, {param}::integer, {param}::bigint)"
        values = f'(VALUES {", ".join([row] * rows)}) AS v("id", "status", "attempts", "next")'
        columns = ('v."id"', 'v."status"', 'v."attempts"', 'v."next"')
    else:
        row = f"({param}, {param}, {param}, {param})"
        values = f"(VALUES {', '.join([row] * rows)}) AS v"
        columns = ("v.column1", "v.column2", "v.column3", "v.column4")
    rid, status, attempts, following = columns
    final = '"recipient"."status" IN ({})'.format(", ".join(f"'{s}'" for s in FINAL_STATES))
    # The first parameter is the time of recording, the last the lease owner.
    return (
        f'UPDATE "recipient" SET "updated_at" = {param}, '
        f'"status" = CASE WHEN {final} THEN "recipient"."status" ELSE {status} END, '
        f'"attempts" = {attempts}, '
        f'"next_attempt_at" = CASE WHEN {final} THEN NULL ELSE {following} END, '
        f'"lease_owner" = NULL, "lease_expires_at" = NULL, "waiting_on" = NULL FROM {values} '
        f'WHERE "recipient"."id" = {rid} AND "recipient"."lease_owner" = {param} '
        'RETURNING "recipient"."id"'
    )
