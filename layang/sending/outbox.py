"""The outbox: the one way in (``enqueue``) and the worker's side of the queue (claim, record).

A recipient row is due while ``next_attempt_at`` is set and has passed; a worker claims a batch by
setting a lease on it, so several workers never take the same one, and a worker that dies loses its
batch to another once the lease runs out.
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from layang.clock import iso_ms, now_ms
from layang.db import insert_atomically, is_postgresql, new_id, write_transaction
from layang.models import (
    BOUNCE,
    DELAY,
    DELIVERY,
    INJECTION,
    Account,
    Event,
    Recipient,
    Transmission,
)
from layang.sending.message import OutgoingMessage, domain_of
from layang.sending.relay import RecipientResult

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
    into MIME by the worker) or ``raw``, finished MIME bytes (SMTP submissions)."""

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


def enqueue(account: Account, submission: Submission) -> None:
    """Store ``submission`` and queue one email per recipient, in one durable transaction."""
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
    recipient_rows = [
        (
            rid,
            submission.transmission_id,
            account.id,
            address,
            kind,
            INJECTION,
            created,
            created,
            0,
            created,
        )
        for rid, (address, kind) in zip(recipient_ids, submission.recipients, strict=True)
    ]
    insert_atomically(
        [
            (Transmission, TRANSMISSION_FIELDS, [transmission_row]),
            (Recipient, RECIPIENT_FIELDS, recipient_rows),
        ]
    )


def queue_message(
    account: Account, message: OutgoingMessage, metadata: Mapping[str, Any], source: str = "api"
) -> str:
    """Queue ``message`` (addresses normalised, rules checked) for each of its recipients;
    returns the transmission id once it is durably stored. The message is dated now."""
    transmission_id = new_id()
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
        recipients=message.envelope_recipients(),
        message=message,
    )
    enqueue(account, submission)
    log.info(
        "accepted tid=%s account=%s recipients=%d source=%s",
        transmission_id,
        account.name,
        len(submission.recipients),
        source,
    )
    return transmission_id


def claim_due_recipients(owner: str, limit: int, lease_seconds: float) -> list[Recipient]:
    """Lease up to ``limit`` due recipients to ``owner`` and return them, oldest due first.

    On PostgreSQL concurrent claimers skip each other's locked rows; on SQLite the IMMEDIATE
    transaction serialises them. Either way no row is handed to two live leases.
    """
    now = now_ms()
    lease_until = now + int(lease_seconds * 1000)
    with write_transaction():
        due = (
            Recipient.select(Recipient.id)
            .where(
                Recipient.next_attempt_at <= now,
                Recipient.lease_expires_at.is_null() | (Recipient.lease_expires_at < now),
            )
            .order_by(Recipient.next_attempt_at)
            .limit(limit)
        )
        if is_postgresql():
            due = due.for_update(skip_locked=True)
        ids = [row.id for row in due]
        if not ids:
            return []
        Recipient.update(lease_owner=owner, lease_expires_at=lease_until).where(
            Recipient.id.in_(ids)
        ).execute()
    claimed = list(Recipient.select().where(Recipient.id.in_(ids), Recipient.lease_owner == owner))
    order = {rid: i for i, rid in enumerate(ids)}
    claimed.sort(key=lambda r: order[r.id])
    return claimed


def renew_lease(owner: str, ids: Sequence[str], lease_seconds: float) -> set[str]:
    """Extend ``owner``'s lease on ``ids``; returns the ids it still holds."""
    now = now_ms()
    with write_transaction():
        held = {
            r.id
            for r in Recipient.select(Recipient.id).where(
                Recipient.id.in_(list(ids)),
                Recipient.lease_owner == owner,
                Recipient.next_attempt_at.is_null(False),
            )
        }
        if held:
            Recipient.update(lease_expires_at=now + int(lease_seconds * 1000)).where(
                Recipient.id.in_(list(held))
            ).execute()
    return held


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

    recipients: Sequence[Recipient]
    results: dict[str, RecipientResult]
    built: tuple[str, bytes] | None = None


def record_attempts(owner: str, attempts: Sequence[Attempt], policy: RetryPolicy) -> dict[str, str]:
    """Store, in one transaction, the outcome of each attempt for every recipient ``owner``
    still holds.

    Returns recipient id → the status recorded. A recipient whose lease was lost to another
    worker is left to that worker (delivery is at-least-once).
    """
    now = now_ms()
    recorded: dict[str, str] = {}
    with write_transaction():
        for attempt in attempts:
            recorded.update(_record_attempt(owner, attempt, policy, now))
    return recorded


def _record_attempt(owner: str, attempt: Attempt, policy: RetryPolicy, now: int) -> dict[str, str]:
    recipients, results, built = attempt.recipients, attempt.results, attempt.built
    recorded: dict[str, str] = {}
    if built and any(r.outcome == "deferred" for r in results.values()):
        Transmission.update(raw=built[1]).where(
            Transmission.id == built[0], Transmission.raw.is_null()
        ).execute()
    for recipient in recipients:
        result = results[recipient.address]
        attempts = recipient.attempts + 1
        detail: dict[str, Any] = {
            "reply": result.reply,
            "code": result.code,
            "attempt": attempts,
        }
        next_attempt = None
        if result.outcome == "delivered":
            status = DELIVERY
        elif result.outcome == "bounced":
            status = BOUNCE
        else:
            next_attempt = policy.next_attempt(attempts, recipient.created_at, now)
            if next_attempt is None:
                status = BOUNCE
                detail["reason"] = "expired"
            else:
                status = DELAY
                detail["retryAt"] = iso_ms(next_attempt)
        updated = (
            Recipient.update(
                status=status,
                attempts=attempts,
                updated_at=now,
                next_attempt_at=next_attempt,
                lease_owner=None,
                lease_expires_at=None,
            )
            .where(Recipient.id == recipient.id, Recipient.lease_owner == owner)
            .execute()
        )
        if not updated:
            log.warning("lease lost tid=%s rid=%s", recipient.transmission_id, recipient.id)
            continue
        Event.insert(
            recipient=recipient.id, status=status, created_at=now, detail=json.dumps(detail)
        ).execute()
        recorded[recipient.id] = status
    return recorded
