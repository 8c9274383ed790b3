"""Accepting a transmission from the API: the rules that apply after the request is well formed."""

from __future__ import annotations

import logging
from typing import Any

import templates_store
from layang.config import Config
from layang.domain.errors import PayloadTooLarge, TemplateNotFound, ValidationFailed
from layang.domain.sandbox import check_recipients, check_sender
from layang.models import Account
from layang.sending.outbox import RECIPIENT_KINDS, queue_payload

log = logging.getLogger("layang.transmissions")


def _address(raw: dict[str, str]) -> dict[str, str]:
    address = {"email": raw["email"]}  # already normalised by the request schema
    if raw.get("name"):
        address["name"] = raw["name"]
    return address


def _content_size(data: dict[str, Any]) -> int:
    size = len(data.get("bodyText", "").encode()) + len(data.get("bodyHtml", "").encode())
    for attachment in data.get("attachments", ()):
        # Base64 decodes to three bytes per four characters, less padding.
        encoded = "".join(attachment["value"].split())
        size += len(encoded) * 3 // 4 - encoded.count("=")
    return size


def _render_template(account: Account, data: dict[str, Any]) -> dict[str, Any]:
    """Subject and bodies from the template's current version, rendered now: the message is
    fixed at acceptance, whatever happens to the template before the worker relays it."""
    template_id = data["templateId"]
    try:
        version, compiled = templates_store.compiled_version(account.id, template_id)
    except templates_store.TemplateNotFound:
        raise TemplateNotFound(f"templateId: no template {template_id!r}.") from None
    rendered = compiled.render(data.get("substitutionData", {}))
    content: dict[str, Any] = {"template": {"id": template_id, "version": version}}
    if rendered.body_text:
        content["bodyText"] = rendered.body_text
    if rendered.body_html:
        content["bodyHtml"] = rendered.body_html
    if "bodyText" not in content and "bodyHtml" not in content:
        raise ValidationFailed(
            f"templateId: template {template_id!r} renders no body.",
            {"templateId": ["The template renders no body."]},
        )
    if "subject" not in data:
        if not rendered.subject or not rendered.subject.strip():
            raise ValidationFailed(
                "subject: Missing, and the template has no subject.",
                {"subject": ["Missing data for required field."]},
            )
        content["subject"] = rendered.subject.strip()
    return content


def accept_transmission(account: Account, data: dict[str, Any], config: Config) -> str:
    """Turn a validated transmission request into a queued message; returns its id.

    Raises ``PayloadTooLarge`` over ``LAYANG_MAX_MESSAGE_BYTES``, ``TemplateNotFound`` for an
    unknown ``templateId``, ``SenderNotAllowed`` / ``RecipientNotAuthorized`` when a sandbox
    account breaks the sandbox rules (then nothing is queued). Returns only once the message
    is durably stored.
    """
    if "templateId" in data:
        data = {**data, **_render_template(account, data)}
    if _content_size(data) > config.max_message_bytes:
        raise PayloadTooLarge(
            f"The message is larger than the {config.max_message_bytes} bytes accepted."
        )

    sender = _address(data["from_"])
    payload: dict[str, Any] = {"from": sender, "subject": data["subject"]}
    for kind in (*RECIPIENT_KINDS, "replyTo"):
        if kind in data:
            payload[kind] = [_address(a) for a in data[kind]]
    check_sender(account, sender["email"], config)
    check_recipients(
        account,
        {kind: [a["email"] for a in payload[kind]] for kind in RECIPIENT_KINDS if kind in payload},
    )
    for key in ("bodyText", "bodyHtml", "headers", "template"):
        if key in data:
            payload[key] = data[key]
    if "attachments" in data:
        payload["attachments"] = [
            {**a, "value": "".join(a["value"].split())} for a in data["attachments"]
        ]
    payload["options"] = data.get("optionsAttributes", {})
    return queue_payload(account, payload, data.get("metadata", {}))
