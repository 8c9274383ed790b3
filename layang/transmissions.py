"""Accepting a transmission from the API: the rules that apply after the request is well formed."""

from __future__ import annotations

import json
import logging
from typing import Any

from layang.addresses import domain_of, normalize_address
from layang.config import Config
from layang.db import new_id, now_ms
from layang.errors import PayloadTooLarge, TemplateNotFound
from layang.models import Account
from layang.sending.outbox import Submission, enqueue

log = logging.getLogger("layang.transmissions")

RECIPIENT_KINDS = ("to", "cc", "bcc")


def _address(raw: dict[str, str]) -> dict[str, str]:
    address = {"email": normalize_address(raw["email"])}
    if raw.get("name"):
        address["name"] = raw["name"]
    return address


def _envelope_recipients(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(address, kind) for every distinct recipient; an address listed twice gets one email,
    under the first kind it appears in (to, then cc, then bcc)."""
    seen: set[str] = set()
    recipients = []
    for kind in RECIPIENT_KINDS:
        for address in data.get(kind, ()):
            key = address["email"].lower()
            if key not in seen:
                seen.add(key)
                recipients.append((address["email"], kind))
    return recipients


def _content_size(data: dict[str, Any]) -> int:
    size = len(data.get("bodyText", "").encode()) + len(data.get("bodyHtml", "").encode())
    for attachment in data.get("attachments", ()):
        # Base64 decodes to three bytes per four characters, less padding.
        encoded = "".join(attachment["value"].split())
        size += len(encoded) * 3 // 4 - encoded.count("=")
    return size


def accept_transmission(account: Account, data: dict[str, Any], config: Config) -> str:
    """Turn a validated transmission request into a queued message; returns its id.

    Raises ``PayloadTooLarge`` over ``LAYANG_MAX_MESSAGE_BYTES`` and ``TemplateNotFound`` for an
    unknown ``templateId``. Returns only once the message is durably stored.
    """
    if _content_size(data) > config.max_message_bytes:
        raise PayloadTooLarge(
            f"The message is larger than the {config.max_message_bytes} bytes accepted."
        )
    if "templateId" in data:
        raise TemplateNotFound(f"templateId: no template {data['templateId']!r}.")

    sender = _address(data["from_"])
    payload: dict[str, Any] = {"from": sender, "subject": data["subject"]}
    for kind in (*RECIPIENT_KINDS, "replyTo"):
        if kind in data:
            payload[kind] = [_address(a) for a in data[kind]]
    for key in ("bodyText", "bodyHtml", "headers"):
        if key in data:
            payload[key] = data[key]
    if "attachments" in data:
        payload["attachments"] = [
            {**a, "value": "".join(a["value"].split())} for a in data["attachments"]
        ]
    payload["options"] = data.get("optionsAttributes", {})
    return queue_payload(account, payload, data.get("metadata", {}))


def queue_payload(
    account: Account, payload: dict[str, Any], metadata: dict[str, str], source: str = "api"
) -> str:
    """Queue a message described by a normalised payload (addresses already normalised);
    returns the transmission id once it is durably stored."""
    transmission_id = new_id()
    accepted_at = now_ms()
    payload["date"] = accepted_at
    sender = payload["from"]
    submission = Submission(
        transmission_id=transmission_id,
        created_at=accepted_at,
        source=source,
        mail_from=sender["email"],
        from_header=json.dumps(sender),
        subject=payload["subject"],
        message_id=f"<{transmission_id}@{domain_of(sender['email'])}>",
        metadata=metadata,
        recipients=_envelope_recipients(payload),
        payload=payload,
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
