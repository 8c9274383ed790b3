"""Mail received for inbound routes: stored as received, posted to the route's endpoint as the
JSON of ``layang.inbound`` (docs/api.md, "Inbound routing"), listed and retried from the API.

``store_received`` runs before the inbound server answers ``250``: one transaction stores the
message (whole, as received) for each route it was sent to and, for a ``webhook`` route, queues
its delivery in the webhook outbox, so a crash either loses nothing acknowledged or acknowledges
nothing. The delivery's body is fixed then: every retry sends the same bytes under the same
``webhook-id``. A route's deliveries go out one at a time, in order of arrival
(``layang.webhooks.outbox``). Attachments up to ``LAYANG_INBOUND_INLINE_MB`` are in the JSON
(Base64); larger ones are a download URL that needs the account's API key.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layang.clock import iso_ms, now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.errors import InvalidInput, NotFound
from layang.domain.inbound_routing import RouteTarget, pending_delivery
from layang.ids import id_floor, new_id
from layang.mail.received import Address, ReceivedMail, read_received
from layang.models import (
    INBOUND_HOLD,
    INBOUND_WEBHOOK,
    Account,
    InboundEmail,
    InboundRoute,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
)
from layang.pagination import Page, keyset_page

MIB = 1024 * 1024
HELD = "held"
# The statuses a message shows: its delivery's, or "held".
STATUSES = (HELD, "pending", "delivered", "failed")
DELETE_BATCH = 500


@dataclass(frozen=True, slots=True)
class Arrival:
    """One accepted message: the envelope, the bytes, and what was found on arrival."""

    mail_from: str
    rcpt_to: tuple[str, ...]
    data: bytes
    parsed: ReceivedMail
    authentication: dict[str, str]
    spam_score: float | None


@dataclass(frozen=True, slots=True)
class InboundAttempt:
    """One POST of a message to its route's endpoint."""

    id: str
    webhook_id: str
    status: str
    response_status: int | None
    error: str | None
    attempted_at: int
    next_attempt_at: int | None


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """A received message as listed: ``message`` is the JSON posted (attachments' content left
    out), ``status`` is ``held`` or its latest delivery's (``pending``, ``delivered``,
    ``failed``)."""

    id: str
    route_id: str | None
    route_match: str
    action: str
    status: str
    note: str | None
    received_at: int
    mail_from: str
    rcpt_to: tuple[str, ...]
    size: int
    spam_score: float | None
    message: dict[str, Any]
    attempts: tuple[InboundAttempt, ...] = ()


def _address(address: Address | None) -> dict[str, str] | None:
    return None if address is None else {"email": address.email, "name": address.name}


def attachment_url(config: Config, message_id: str, index: int) -> str:
    return f"{config.public_url}/v1/layang/inbound/messages/{message_id}/attachments/{index}"


def message_json(
    message_id: str,
    received_at: int,
    arrival: Arrival,
    mailbox_hash: str,
    config: Config,
) -> dict[str, Any]:
    """The ``message`` object of a ``layang.inbound`` webhook."""
    parsed = arrival.parsed
    inline_limit = config.inbound_inline_mb * MIB
    attachments = []
    for index, attachment in enumerate(parsed.attachments):
        shown: dict[str, Any] = {
            "filename": attachment.filename,
            "contentType": attachment.content_type,
            "size": len(attachment.content),
            "contentId": attachment.content_id,
        }
        if len(attachment.content) <= inline_limit:
            shown["content"] = base64.b64encode(attachment.content).decode("ascii")
        else:
            shown["url"] = attachment_url(config, message_id, index)
        attachments.append(shown)
    found: dict[str, Any] = {
        "id": message_id,
        "receivedAt": iso_ms(received_at),
        "from": _address(parsed.from_),
        "to": [_address(a) for a in parsed.to],
        "cc": [_address(a) for a in parsed.cc],
        "replyTo": [_address(a) for a in parsed.reply_to],
        "subject": parsed.subject,
        "messageId": parsed.message_id,
        "inReplyTo": parsed.in_reply_to,
        "references": list(parsed.references),
        "date": parsed.date,
        "text": parsed.text,
        "html": parsed.html,
        "strippedTextReply": parsed.stripped_text_reply,
        "headers": [{"name": n, "value": v} for n, v in parsed.headers],
        "attachments": attachments,
        "mailboxHash": mailbox_hash,
        "spamScore": arrival.spam_score,
        "authentication": arrival.authentication,
        "envelope": {"from": arrival.mail_from, "to": list(arrival.rcpt_to)},
    }
    if parsed.problem:
        found["parseProblem"] = parsed.problem
    return found


def _body(message: dict[str, Any]) -> str:
    return json.dumps({"type": "layang.inbound", "message": message}, separators=(",", ":"))


def store_received(
    arrival: Arrival, routes: dict[str, list[RouteTarget]], config: Config
) -> list[str]:
    """Store ``arrival`` once for each route (by id, with the recipients that matched it) and
    queue the posts of the webhook routes, in one transaction; returns the stored ids. A route
    deleted since RCPT keeps the message as held. A message whose spam score reaches the
    route's ``spamThreshold`` is held, not posted."""
    now = now_ms()
    stored = []
    from_header = _address(arrival.parsed.from_) or {}
    with write_transaction():
        for route_id, targets in routes.items():
            target = targets[0]
            route = InboundRoute.get_or_none(InboundRoute.id == route_id)
            message_id = new_id()
            message = message_json(message_id, now, arrival, target.mailbox_hash, config)
            body = _body(message)
            action, note, delivery_id = target.action, None, None
            if route is None:
                action, note = INBOUND_HOLD, "The route was deleted while the message arrived."
            elif action == INBOUND_WEBHOOK:
                threshold = route.spam_threshold
                if threshold is not None and (arrival.spam_score or 0) >= threshold:
                    action = INBOUND_HOLD
                    note = f"Spam score {arrival.spam_score} reached the route's {threshold}."
                elif route.endpoint_id is None:
                    action, note = INBOUND_HOLD, "The route has no endpoint."
                else:
                    delivery_id = pending_delivery(route.endpoint_id, body, now, message_id)
            InboundEmail.insert(
                id=message_id,
                account=target.account_id,
                route=route.id if route is not None else None,
                route_match=target.match,
                action=action,
                received_at=now,
                mail_from=arrival.mail_from,
                rcpt_to=json.dumps([t.address.lower() for t in targets]),
                from_header=from_header.get("email", ""),
                subject=arrival.parsed.subject[:998],
                size=len(arrival.data),
                spam_score=arrival.spam_score,
                note=note,
                payload=body,
                raw=arrival.data,
                delivery_id=delivery_id,
                deliveries=json.dumps([delivery_id] if delivery_id else []),
            ).execute()
            stored.append(message_id)
    return stored


# -- reading and retrying ---------------------------------------------------------------------


def _get(account: Account, message_id: str) -> InboundEmail:
    row = InboundEmail.get_or_none(
        (InboundEmail.id == message_id) & (InboundEmail.account == account.id)
    )
    if row is None:
        raise NotFound(f"No inbound message {message_id!r}.")
    return row


def _status(row: InboundEmail, deliveries: dict[str, str]) -> str:
    if row.delivery_id is None:
        return HELD
    # A delivery is gone when its route was deleted, or 30 days after it settled (a longer
    # LAYANG_INBOUND_RETENTION_DAYS outlives it): "failed" never claims a post not known to
    # have happened.
    return deliveries.get(row.delivery_id, "failed")


def _shown(
    row: InboundEmail, deliveries: dict[str, str], attempts: Sequence[InboundAttempt] = ()
) -> InboundMessage:
    message = json.loads(row.payload)["message"]
    for attachment in message.get("attachments", []):
        attachment.pop("content", None)
    return InboundMessage(
        id=row.id,
        route_id=row.route_id,
        route_match=row.route_match,
        action=row.action,
        status=_status(row, deliveries),
        note=row.note,
        received_at=row.received_at,
        mail_from=row.mail_from,
        rcpt_to=tuple(json.loads(row.rcpt_to)),
        size=row.size,
        spam_score=row.spam_score,
        message=message,
        attempts=tuple(attempts),
    )


def _delivery_statuses(ids: Sequence[str]) -> dict[str, str]:
    if not ids:
        return {}
    return {
        d.id: d.status
        for d in WebhookDelivery.select(WebhookDelivery.id, WebhookDelivery.status).where(
            WebhookDelivery.id.in_(list(ids))
        )
    }


_LISTED = (
    InboundEmail.id,
    InboundEmail.route,
    InboundEmail.route_match,
    InboundEmail.action,
    InboundEmail.received_at,
    InboundEmail.mail_from,
    InboundEmail.rcpt_to,
    InboundEmail.size,
    InboundEmail.spam_score,
    InboundEmail.note,
    InboundEmail.payload,
    InboundEmail.delivery_id,
)


def list_messages(
    account: Account,
    *,
    limit: int = 50,
    cursor: str | None = None,
    route_id: str | None = None,
    status: str | None = None,
    sender: str | None = None,
    recipient: str | None = None,
) -> Page[InboundMessage]:
    """One page of the account's received mail, newest first; filtered by route, status
    (``held``, ``pending``, ``delivered``, ``failed``), envelope sender or a recipient (exact,
    case-insensitive). ``InvalidInput`` for an unknown status."""
    query = InboundEmail.select(*_LISTED).where(InboundEmail.account == account.id)
    if route_id:
        query = query.where(InboundEmail.route == route_id)
    if sender:
        query = query.where(InboundEmail.mail_from == sender.strip())
    if recipient:
        query = query.where(InboundEmail.rcpt_to.contains(json.dumps(recipient.strip().lower())))
    if status:
        if status not in STATUSES:
            raise InvalidInput("status", f"Use one of {', '.join(STATUSES)}.")
        if status == HELD:
            query = query.where(InboundEmail.delivery_id.is_null())
        else:
            query = query.join(
                WebhookDelivery, on=(WebhookDelivery.id == InboundEmail.delivery_id)
            ).where(WebhookDelivery.status == status)
    page = keyset_page(query, InboundEmail.id, limit=limit, cursor=cursor)
    statuses = _delivery_statuses([r.delivery_id for r in page.items if r.delivery_id])
    return page.map(lambda row: _shown(row, statuses))


def get_message(account: Account, message_id: str) -> InboundMessage:
    """The message, with every attempt to post it (newest first). ``NotFound``."""
    row = _get(account, message_id)
    deliveries = json.loads(row.deliveries)
    attempts = []
    if deliveries:
        attempts = [
            InboundAttempt(
                id=a.id,
                webhook_id=f"msg_{a.delivery_id}",
                status=a.status,
                response_status=a.response_status,
                error=a.error,
                attempted_at=a.attempted_at,
                next_attempt_at=a.next_attempt_at,
            )
            for a in WebhookAttempt.select()
            .where(WebhookAttempt.delivery.in_(deliveries))
            .order_by(WebhookAttempt.id.desc())
        ]
    return _shown(row, _delivery_statuses([row.delivery_id] if row.delivery_id else []), attempts)


def raw_message(account: Account, message_id: str) -> bytes:
    """The message exactly as received. ``NotFound``."""
    return bytes(_get(account, message_id).raw)


def attachment(account: Account, message_id: str, index: int) -> tuple[str, str, bytes]:
    """(filename, content type, bytes) of the message's attachment number ``index`` (from 0,
    in the order of the JSON). ``NotFound``."""
    row = _get(account, message_id)
    parsed = read_received(bytes(row.raw))
    if not 0 <= index < len(parsed.attachments):
        raise NotFound(f"No attachment {index} in inbound message {message_id!r}.")
    found = parsed.attachments[index]
    return found.filename, found.content_type, found.content


def retry_message(account: Account, message_id: str) -> InboundMessage:
    """Post the message again to its route's endpoint now, as a new delivery (a new
    ``webhook-id``): also a held message, once its route posts. ``NotFound``; ``InvalidInput``
    when its route is gone or posts nowhere."""
    with write_transaction():
        row = _get(account, message_id)
        route = InboundRoute.get_or_none(InboundRoute.id == row.route_id) if row.route_id else None
        if route is None or route.action != INBOUND_WEBHOOK or route.endpoint_id is None:
            raise InvalidInput("route", "The message's route is gone or does not post.")
        endpoint = WebhookEndpoint.get_or_none(WebhookEndpoint.id == route.endpoint_id)
        if endpoint is None:
            raise InvalidInput("route", "The message's route has no endpoint.")
        delivery_id = pending_delivery(endpoint.id, row.payload, now_ms(), row.id)
        InboundEmail.update(
            delivery_id=delivery_id,
            deliveries=json.dumps([*json.loads(row.deliveries), delivery_id]),
            action=INBOUND_WEBHOOK,
            note=None,
        ).where(InboundEmail.id == row.id).execute()
    return get_message(account, message_id)


def delete_old(config: Config, now: int | None = None) -> int:
    """Delete up to ``DELETE_BATCH`` messages received more than
    ``LAYANG_INBOUND_RETENTION_DAYS`` ago (ids are time-ordered); returns how many went."""
    now = now_ms() if now is None else now
    cutoff = id_floor(now - config.inbound_retention_days * 86_400_000)
    with write_transaction(durable=False):
        ids = [
            r.id
            for r in InboundEmail.select(InboundEmail.id)
            .where(InboundEmail.id < cutoff)
            .order_by(InboundEmail.id)
            .limit(DELETE_BATCH)
        ]
        if not ids:
            return 0
        return InboundEmail.delete().where(InboundEmail.id.in_(ids)).execute()
