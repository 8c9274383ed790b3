"""The outbox: the one way in (``enqueue``) and the worker's side of the queue (claim, record).

A recipient row is due while ``next_attempt_at`` is set and has passed; a worker claims a batch by
setting a lease on it, so several workers never take the same one, and a worker that dies loses its
batch to another once the lease runs out.
"""

from __future__ import annotations

import functools
import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from layang.clock import iso_ms, now_ms
from layang.db import (
    Batch,
    database,
    insert_atomically,
    is_postgresql,
    new_id,
    write_transaction,
)
from layang.models import (
    BOUNCE,
    COMPLAINT,
    DELAY,
    DELIVERY,
    INJECTION,
    SUPPRESSED,
    Account,
    Recipient,
    Transmission,
)
from layang.sending import simulator
from layang.sending.bounce_class import classify
from layang.sending.events import append_events, event_batches, injection_batches
from layang.sending.message import OutgoingMessage, domain_of
from layang.sending.relay import BOUNCED, DEFERRED, DELIVERED, RecipientResult
from layang.sending.suppression import suppressed_addresses, suppressed_event_detail

log = logging.getLogger("layang.outbox")

TRANSMISSION_FIELDS = (
    "id",
    "account",
    "created_at",
    "source",
    "mail_from",
    "from_header",
    "subject",
    "message_id",
    "metadata",
    "payload",
    "raw",
)
RECIPIENT_FIELDS = (
    "id",
    "transmission",
    "account",
    "address",
    "recipient_type",
    "status",
    "created_at",
    "updated_at",
    "attempts",
    "next_attempt_at",
)


@dataclass(frozen=True)
class Submission:
    """A message accepted by one of the ways in, ready to be stored: either ``message`` (built
    into MIME by the worker) or ``raw``, finished MIME bytes (SMTP submissions).

    ``suppressed`` maps the lower-cased recipients on the suppression list to the reason
    (see ``suppressed_addresses``): they get a ``Suppressed`` record and are never queued."""

    transmission_id: str
    created_at: int
    source: str
    mail_from: str
    from_header: str
    subject: str
    message_id: str
    metadata: Mapping[str, Any]
    recipients: Sequence[tuple[str, str]]
    message: OutgoingMessage | None = None
    raw: bytes | None = None
    suppressed: Mapping[str, str] = field(default_factory=dict)


def enqueue(account: Account, submission: Submission, also: Sequence[Batch] = ()) -> None:
    """Store ``submission`` and queue one email per recipient, in one durable transaction,
    with the rows of ``also`` (an idempotency key's answer): all or nothing. A suppressed
    recipient's record is stored ``Suppressed``, with its event, and never queued; the
    others' Injection events go to webhooks."""
    created = submission.created_at
    recipient_ids = [new_id() for _ in submission.recipients]
    message = submission.message
    payload = None if message is None else json.dumps(message.to_payload(), separators=(",", ":"))
    transmission_row = (
        submission.transmission_id,
        account.id,
        created,
        submission.source,
        submission.mail_from,
        submission.from_header,
        submission.subject,
        submission.message_id,
        json.dumps(submission.metadata),
        payload,
        submission.raw,
    )
    recipient_rows = []
    injected: list[str] = []
    suppressed_events = []
    for rid, (address, kind) in zip(recipient_ids, submission.recipients, strict=True):
        reason = submission.suppressed.get(address.lower())
        if reason is None:
            row = (rid, submission.transmission_id, account.id, address, kind, INJECTION)
            recipient_rows.append((*row, created, created, 0, created))
            injected.append(rid)
        else:
            row = (rid, submission.transmission_id, account.id, address, kind, SUPPRESSED)
            recipient_rows.append((*row, created, created, 0, None))
            suppressed_events.append((rid, SUPPRESSED, created, suppressed_event_detail(reason)))
    insert_atomically(
        [
            (Transmission, TRANSMISSION_FIELDS, [transmission_row]),
            (Recipient, RECIPIENT_FIELDS, recipient_rows),
            *event_batches(suppressed_events),
            *injection_batches(account.id, injected, created),
            *also,
        ]
    )


def queue_message(
    account: Account,
    message: OutgoingMessage,
    metadata: Mapping[str, Any],
    source: str = "api",
    *,
    transmission_id: str | None = None,
    also: Sequence[Batch] = (),
    suppressed: Mapping[str, str] | None = None,
) -> str:
    """Queue ``message`` (addresses normalised, rules checked) for each of its recipients,
    under ``transmission_id`` (default: a new one) and with the rows of ``also`` (see
    ``enqueue``); returns the transmission id once it is durably stored. The message is dated
    now. ``suppressed`` is what ``suppressed_addresses`` found for it, looked up here when
    None."""
    transmission_id = transmission_id or new_id()
    recipients = message.envelope_recipients()
    if suppressed is None:
        suppressed = suppressed_addresses(
            account.id, (a for a, _ in recipients), transactional=message.is_transactional
        )
    accepted_at = now_ms()
    message = replace(message, date_ms=accepted_at)
    sender = message.sender
    submission = Submission(
        transmission_id=transmission_id,
        created_at=accepted_at,
        source=source,
        mail_from=sender.email,
        from_header=json.dumps(
            {"email": sender.email, "name": sender.name} if sender.name else {"email": sender.email}
        ),
        subject=message.subject,
        message_id=f"<{transmission_id}@{domain_of(sender.email)}>",
        metadata=metadata,
        recipients=recipients,
        message=message,
        suppressed=suppressed,
    )
    enqueue(account, submission, also)
    log.info(
        "accepted tid=%s account=%s recipients=%d source=%s",
        transmission_id,
        account.name,
        len(submission.recipients),
        source,
    )
    return transmission_id


# The worker's statements run on every batch: written once per backend and row count, as plain
# SQL, because building them with peewee's query builder cost more than running them.


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

    @property
    def is_transactional(self) -> bool:
        """Whether the message is transactional (see ``OutgoingMessage.is_transactional``);
        SMTP submissions always are."""
        if self.payload is None:
            return True
        return OutgoingMessage.from_payload(json.loads(self.payload)).is_transactional

    @property
    def from_domain(self) -> str:
        """The domain of the From header (the address DKIM aligns with), lower-cased."""
        try:
            address = json.loads(self.from_header)["email"]
        except (ValueError, KeyError, TypeError):
            address = self.mail_from
        return address.rpartition("@")[2].rstrip(".").lower()


def claim_due_recipients(owner: str, limit: int, lease_seconds: float) -> list[ClaimedRecipient]:
    """Lease up to ``limit`` due recipients to ``owner`` and return them, oldest due first.

    One statement: on PostgreSQL concurrent claimers skip each other's locked rows (``FOR
    UPDATE SKIP LOCKED``), on SQLite the statement takes the write lock. Either way no row is
    handed to two live leases.
    """
    now = now_ms()
    cursor = database.execute_sql(
        _claim_sql(database.obj.param, is_postgresql()),
        (owner, now + int(lease_seconds * 1000), now, now, limit),
    )
    rows = cursor.fetchall()
    rows.sort(key=lambda row: (row[5], row[0]))
    return [ClaimedRecipient(*row[:5]) for row in rows]


@functools.cache
def _claim_sql(param: str, postgresql: bool) -> str:
    lock = " FOR UPDATE SKIP LOCKED" if postgresql else ""
    return (
        f'UPDATE "recipient" SET "lease_owner" = {param}, "lease_expires_at" = {param} '
        f'WHERE "id" IN (SELECT "id" FROM "recipient" WHERE "next_attempt_at" <= {param} '
        f'AND ("lease_expires_at" IS NULL OR "lease_expires_at" < {param}) '
        f'ORDER BY "next_attempt_at" LIMIT {param}{lock}) '
        'RETURNING "id", "transmission_id", "address", "attempts", "created_at", '
        '"next_attempt_at"'
    )


def load_transmissions(ids: Sequence[str]) -> dict[str, QueuedTransmission]:
    """The transmissions ``ids``, by id."""
    if not ids:
        return {}
    marks = ", ".join([database.obj.param] * len(ids))
    cursor = database.execute_sql(
        'SELECT "id", "mail_from", "message_id", "payload", "raw", "account_id", "from_header" '
        f'FROM "transmission" WHERE "id" IN ({marks})',
        list(ids),
    )
    return {
        row[0]: QueuedTransmission(*row[:4], None if row[4] is None else bytes(row[4]), *row[5:])
        for row in cursor.fetchall()
    }


def renew_leases(owner: str, ids: Sequence[str], lease_seconds: float) -> set[str]:
    """Extend ``owner``'s lease on those of ``ids`` it still holds; returns them."""
    return renew_leases_in("recipient", owner, ids, lease_seconds)


def renew_leases_in(table: str, owner: str, ids: Sequence[str], lease_seconds: float) -> set[str]:
    """``renew_leases`` for any ``table`` held the same way (``lease_owner``,
    ``lease_expires_at``, due while ``next_attempt_at`` is set): the recipients, the webhook
    deliveries."""
    if not ids:
        return set()
    param = database.obj.param
    marks = ", ".join([param] * len(ids))
    cursor = database.execute_sql(
        f'UPDATE "{table}" SET "lease_expires_at" = {param} '
        f'WHERE "lease_owner" = {param} AND "next_attempt_at" IS NOT NULL AND "id" IN ({marks}) '
        'RETURNING "id"',
        [now_ms() + int(lease_seconds * 1000), owner, *ids],
    )
    return {row[0] for row in cursor.fetchall()}


def release(owner: str, ids: Sequence[str]) -> int:
    """Hand ``ids`` back to the queue at once if ``owner`` still holds them; returns how many."""
    if not ids:
        return 0
    param = database.obj.param
    marks = ", ".join([param] * len(ids))
    cursor = database.execute_sql(
        'UPDATE "recipient" SET "lease_owner" = NULL, "lease_expires_at" = NULL '
        f'WHERE "lease_owner" = {param} AND "id" IN ({marks})',
        [owner, *ids],
    )
    return cursor.rowcount


def release_leases(owner: str) -> int:
    """Hand every email ``owner`` still holds back to the queue; returns how many.

    For a worker whose cycle broke off (the database went away): the rest of its batch becomes
    due again at once instead of when the lease runs out.
    """
    return (
        Recipient.update(lease_owner=None, lease_expires_at=None)
        .where(Recipient.lease_owner == owner, Recipient.next_attempt_at.is_null(False))
        .execute()
    )


@dataclass(frozen=True)
class RetryPolicy:
    base_seconds: float
    max_delivery_seconds: float

    def next_attempt(self, attempts: int, created_at: int, now: int) -> int | None:
        """When to try again after ``attempts`` failed tries, or None once the message expired.

        The delay doubles with each attempt, with ±25% jitter so that mail deferred together
        does not come back together; the last try lands on the expiry time itself.
        """
        deadline = created_at + int(self.max_delivery_seconds * 1000)
        if now >= deadline:
            return None
        delay = self.base_seconds * 2 ** max(attempts - 1, 0) * random.uniform(0.75, 1.25)
        return min(now + int(delay * 1000), deadline)


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
                recipient, attempt.results[recipient.address], policy, now
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


_KEEP_RAW_SQL = 'UPDATE "transmission" SET "raw" = ? WHERE "id" = ? AND "raw" IS NULL'


def _outcome(
    recipient: ClaimedRecipient, result: RecipientResult, policy: RetryPolicy, now: int
) -> tuple[str, int | None, str]:
    """(status, next attempt or None, event detail as JSON) for one recipient's result."""
    attempts = recipient.attempts + 1
    detail: dict[str, Any] = {"reply": result.reply, "code": result.code, "attempt": attempts}
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
    held, returning the ids it updated."""
    if postgresql:
        row = f"({param}, {param}, {param}::integer, {param}::bigint)"
        values = f'(VALUES {", ".join([row] * rows)}) AS v("id", "status", "attempts", "next")'
        columns = ('v."id"', 'v."status"', 'v."attempts"', 'v."next"')
    else:
        row = f"({param}, {param}, {param}, {param})"
        values = f"(VALUES {', '.join([row] * rows)}) AS v"
        columns = ("v.column1", "v.column2", "v.column3", "v.column4")
    rid, status, attempts, following = columns
    # The first parameter is the time of recording, the last the lease owner.
    return (
        f'UPDATE "recipient" SET "updated_at" = {param}, "status" = {status}, '
        f'"attempts" = {attempts}, "next_attempt_at" = {following}, '
        f'"lease_owner" = NULL, "lease_expires_at" = NULL FROM {values} '
        f'WHERE "recipient"."id" = {rid} AND "recipient"."lease_owner" = {param} '
        'RETURNING "recipient"."id"'
    )
