"""Accepting a message: the rules that apply once a request is well formed, then ``enqueue``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import peewee

import templates_store
from layang.config import Config
from layang.db import new_id
from layang.domain.errors import (
    IdempotencyInFlight,
    InvalidInput,
    MessageTooLarge,
    TemplateNotFound,
)
from layang.domain.idempotency import Claim
from layang.domain.rate_limits import take
from layang.domain.sandbox import check_recipients, check_sender
from layang.models import Account
from layang.sending.message import RECIPIENT_KINDS, OutgoingMessage
from layang.sending.outbox import queue_message


@dataclass(frozen=True, slots=True)
class TransmissionRequest:
    """A send as a client asked for it: the message (a draft, when a template fills in its
    subject and bodies), the template and its data, and metadata kept with every record."""

    message: OutgoingMessage
    template_id: str | None = None
    substitution_data: Mapping[str, Any] = field(default_factory=dict)
    metadata: Mapping[str, str] = field(default_factory=dict)


def _render_template(account: Account, request: TransmissionRequest) -> OutgoingMessage:
    """The message with subject and bodies from the template's current version, rendered now:
    the message is fixed at acceptance, whatever happens to the template before it is relayed."""
    template_id = request.template_id
    try:
        _, compiled = templates_store.compiled_version(account.id, template_id)
    except templates_store.TemplateNotFound:
        raise TemplateNotFound(template_id) from None
    rendered = compiled.render(dict(request.substitution_data))
    text = rendered.body_text or None
    html = rendered.body_html or None
    if text is None and html is None:
        raise InvalidInput("template_id", f"Template {template_id!r} renders no body.")
    subject = request.message.subject
    if not subject:
        if not rendered.subject or not rendered.subject.strip():
            raise InvalidInput("subject", "Missing, and the template has no subject.")
        subject = rendered.subject.strip()
    return replace(request.message, subject=subject, text=text, html=html)


def send_answer(transmission_id: str) -> str:
    """A send's answer, as an idempotency key records it (the API's 200 body)."""
    return json.dumps({"transmissionId": transmission_id}, separators=(",", ":"))


def accept_transmission(
    account: Account, request: TransmissionRequest, config: Config, claim: Claim | None = None
) -> str:
    """Queue the requested message; returns its transmission id once it is durably stored,
    with the answer to ``claim``'s idempotency key when one is given.

    Raises ``MessageTooLarge`` over ``LAYANG_MAX_MESSAGE_BYTES``, ``TemplateNotFound`` for an
    unknown template, ``InvalidInput`` when the template leaves the message without a body
    or subject, ``SenderNotAllowed`` / ``RecipientNotAuthorized`` when a sandbox account breaks
    the sandbox rules, ``RateLimited`` over ``LAYANG_RATE_LIMIT`` (only messages passing every
    other rule count), ``IdempotencyInFlight`` when another request with the key committed
    first. Nothing is queued when it raises.
    """
    message = request.message
    if request.template_id is not None:
        message = _render_template(account, request)
    if message.content_size() > config.max_message_bytes:
        raise MessageTooLarge(config.max_message_bytes)
    check_sender(account, message.sender.email, config)
    check_recipients(
        account,
        {
            kind: [mailbox.email for mailbox in getattr(message, kind)]
            for kind in RECIPIENT_KINDS
            if getattr(message, kind)
        },
    )
    take(account, config.rate_limit)
    transmission_id = new_id()
    answer = claim.answer_rows(200, send_answer(transmission_id)) if claim else ()
    try:
        return queue_message(
            account, message, request.metadata, transmission_id=transmission_id, also=answer
        )
    except peewee.IntegrityError:
        if claim is None:
            raise
        # Only the answer's unique key can clash: a holder of the same key got there first.
        raise IdempotencyInFlight() from None
