"""Erasing a person from an account (GDPR art. 17; docs/api.md, "Erasing a recipient").

Everything the account holds about one address goes: its activity records (queued ones too:
their mail is not sent), their events (opens and clicks included), the webhook events about
them not yet put into a request, and the messages that went only to that address, content and
all. Messages that went to others too keep their content until it expires (their headers name
the address until then). The suppression entry stays unless asked: it is how the person's wish
not to be mailed is honoured. Other accounts are never touched. The audit log records the
erasure with the SHA-256 of the address, never the address.
"""

from __future__ import annotations

from dataclasses import dataclass

import peewee

from layang.db import write_transaction
from layang.domain.suppressions import email_key
from layang.lifecycle.retention import BATCH, remove_records
from layang.models import Account, Recipient, Suppression, WebhookEndpoint, WebhookEvent
from layang.team import audit


@dataclass(frozen=True, slots=True)
class Erasure:
    """What an erasure removed: ``records``, ``events``, ``messages`` (removed whole), and
    whether the suppression entry went."""

    email: str
    records: int
    events: int
    messages: int
    suppression_removed: bool


def erase_recipient(
    account: Account, email: str, *, actor: str, source: str, suppression: bool = False
) -> Erasure:
    """Erase ``email`` (any case) from ``account``; with ``suppression`` its suppression entry
    too. Records ``recipient.erased`` in the audit log. Raises ``InvalidInput`` (field
    ``email``) when it is not an address. Erasing an address the account never mailed is not an
    error: it removes nothing and says so."""
    key = email_key(email)
    endpoints = WebhookEndpoint.select(WebhookEndpoint.id).where(
        WebhookEndpoint.account == account.id
    )
    records = events = messages = 0
    while True:
        with write_transaction():
            rows = list(
                Recipient.select(Recipient.id, Recipient.transmission)
                .where(
                    (Recipient.account == account.id) & (peewee.fn.LOWER(Recipient.address) == key)
                )
                .order_by(Recipient.id)
                .limit(BATCH)
            )
            if not rows:
                break
            ids = [r.id for r in rows]
            WebhookEvent.delete().where(
                WebhookEvent.recipient_id.in_(ids)
                & WebhookEvent.delivery_id.is_null()
                & WebhookEvent.endpoint.in_(endpoints)
            ).execute()
            removed = remove_records(ids, {r.transmission_id for r in rows})
        records += removed.records
        events += removed.events
        messages += removed.messages
    with write_transaction():
        suppression_removed = bool(
            suppression
            and Suppression.delete()
            .where((Suppression.account == account.id) & (Suppression.email_key == key))
            .execute()
        )
        audit.record(
            account.id,
            actor,
            "recipient.erased",
            audit.address_hash(key),
            source=source,
            detail={
                "records": records,
                "events": events,
                "messages": messages,
                "suppressionRemoved": suppression_removed,
            },
        )
    return Erasure(key, records, events, messages, suppression_removed)
