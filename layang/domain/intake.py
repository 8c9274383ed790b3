"""Accepting a message: the rules that apply once a request is well formed, then ``enqueue``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import templates_store
from layang.config import Config
from layang.domain.errors import InvalidInput, MessageTooLarge, TemplateNotFound
from layang.domain.sandbox import check_recipients, check_sender
from layang.domain.sending_domains import check_sender_domain
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


def accept_transmission(account: Account, request: TransmissionRequest, config: Config) -> str:
    """Queue the requested message; returns its transmission id once it is durably stored.

    Raises ``MessageTooLarge`` over ``LAYANG_MAX_MESSAGE_BYTES``, ``TemplateNotFound`` for an
    unknown template, ``InvalidInput`` when the template leaves the message without a body
    or subject, ``SenderNotAllowed`` / ``RecipientNotAuthorized`` when a sandbox account breaks
    the sandbox rules, ``SenderDomainNotVerified`` when a live account must send from a
    verified domain and does not. Nothing is queued when it raises.
    """
    message = request.message
    if request.template_id is not None:
        message = _render_template(account, request)
    if message.content_size() > config.max_message_bytes:
        raise MessageTooLarge(config.max_message_bytes)
    check_sender(account, message.sender.email, config)
    check_sender_domain(account, message.sender.email, config)
    check_recipients(
        account,
        {
            kind: [mailbox.email for mailbox in getattr(message, kind)]
            for kind in RECIPIENT_KINDS
            if getattr(message, kind)
        },
    )
    return queue_message(account, message, request.metadata)
