"""Delivery status notifications: RFC 3464 ``message/delivery-status`` and RFC 6533
``message/global-delivery-status`` (the same fields, in UTF-8).

Per recipient: its Action, Status, Final-Recipient, and what the remote server said, from
``Diagnostic-Code`` of any type (``smtp``, ``X-Postfix``, ``X-Notes``…) or, where a server puts
it there instead, ``X-Supplementary-Info`` (Exchange, qmail-ldap). A status that only says
"failed" (``5.0.0``, ``4.0.0``) with no words beside it leaves the human-readable part to tell
why (:func:`layang.inbound.mta_bounces.explanation`).
"""

from __future__ import annotations

import email.message
import re

from layang.domain.feedback import DeliveryReport, RecipientStatus
from layang.inbound import powermta, ses_receipt_rules
from layang.inbound import report_parts as mime
from layang.inbound.mta_bounces import explanation

STATUS_TYPES = ("message/delivery-status", "message/global-delivery-status")
_NONSTANDARD_ACTIONS = {"expired": "failed", "bounced": "failed", "bounce": "failed"}
_ENHANCED = re.compile(r"(?<![\d.])([245]\.\d{1,3}\.\d{1,3})(?![\d.])")


def read_dsn(message: email.message.Message) -> DeliveryReport | None:
    """The report of the message's (first) delivery status part, wherever it stands, or
    ``None`` when it has none with a recipient's Action."""
    found = mime.own_parts(message)
    status_part = next((p for p in found if p.get_content_type() in STATUS_TYPES), None)
    if status_part is None:
        return None
    blocks = mime.header_blocks(status_part)
    if not blocks:
        return None
    reporting = mime.typed(mime.value(blocks[0], "Reporting-MTA"))
    told = explanation(message)
    statuses = []
    for block in blocks:
        action = mime.value(block, "Action").lower()
        if not action:
            continue
        # Not one of RFC 3464's actions: a sender's own word for giving up after retries
        # (SendGrid's "expired") is a failure.
        action = _NONSTANDARD_ACTIONS.get(action, action)
        status = mime.value(block, "Status")
        match = _ENHANCED.search(status)
        diagnostic = mime.typed(mime.value(block, "Diagnostic-Code"))
        supplementary = mime.value(block, "X-Supplementary-Info").strip("<>")
        if supplementary and supplementary not in diagnostic:
            diagnostic = f"{diagnostic} {supplementary}".strip()
        statuses.append(
            RecipientStatus(
                action=action,
                status=match.group(1) if match else status[:32],
                diagnostic=diagnostic,
                final_recipient=mime.typed(mime.value(block, "Final-Recipient")),
                explanation=told,
                from_filter=mime.from_content_filter(message),
                stated_class=powermta.stated_class(block)
                or ses_receipt_rules.stated_class(message, told, diagnostic),
            )
        )
    if not statuses:
        return None
    return DeliveryReport(
        reported_by=reporting or mime.sender_host(message),
        statuses=tuple(statuses),
        original_tokens=mime.original_tokens(found),
    )
