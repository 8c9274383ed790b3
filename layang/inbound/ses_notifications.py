"""Amazon SES event notifications, as Amazon SNS delivers them by email: a JSON object in the
text body (``notificationType`` ``Bounce``, ``Complaint`` or ``Delivery``, the fields of the
"Amazon SES notification contents" reference), followed by SNS's unsubscribe footer.

A ``Bounce`` gives each of its ``bouncedRecipients`` with its ``action``, ``status`` and
``diagnosticCode`` (the same fields as RFC 3464's), a ``Complaint`` is a complaint (its
``complaintFeedbackType`` the ARF feedback type), a ``Delivery`` a report with no failure.
"""

from __future__ import annotations

import email.message
import json
import re
from typing import Any

from layang.domain.feedback import DeliveryReport, FeedbackReport, RecipientStatus
from layang.inbound import report_parts as mime

MAX_CHARS = 256 * 1024
"""Longer text is not a notification: SES caps the headers it includes."""
_DSN_TYPE = re.compile(r"^\s*(?:dsn|smtp)\s*;\s*", re.IGNORECASE)


def read_ses_notification(
    message: email.message.Message,
) -> DeliveryReport | FeedbackReport | None:
    """The report an SES notification carries, or ``None`` if the message is not one."""
    body = _notification(message)
    if body is None:
        return None
    kind = body.get("notificationType") or body.get("eventType")
    mail = body.get("mail") if isinstance(body.get("mail"), dict) else {}
    tokens = _tokens(mail)
    if kind == "Complaint":
        complaint = body.get("complaint") if isinstance(body.get("complaint"), dict) else {}
        return FeedbackReport(
            feedback_type=str(complaint.get("complaintFeedbackType") or "abuse"),
            reported_by="amazonses.com",
            user_agent=str(complaint.get("userAgent") or ""),
            original_tokens=tokens,
        )
    if kind == "Bounce":
        bounce = body.get("bounce") if isinstance(body.get("bounce"), dict) else {}
        reporting = _DSN_TYPE.sub("", str(bounce.get("reportingMTA") or ""))
        transient = bounce.get("bounceType") == "Transient"
        statuses = tuple(
            RecipientStatus(
                action=str(r.get("action") or ("delayed" if transient else "failed")).lower(),
                status=str(r.get("status") or ("4.0.0" if transient else "5.0.0")),
                diagnostic=_DSN_TYPE.sub("", str(r.get("diagnosticCode") or "")),
                final_recipient=str(r.get("emailAddress") or ""),
            )
            for r in bounce.get("bouncedRecipients") or ()
            if isinstance(r, dict)
        )
        if not statuses:
            return None
        return DeliveryReport(reporting or "amazonses.com", statuses, tokens)
    if kind == "Delivery":
        delivery = body.get("delivery") if isinstance(body.get("delivery"), dict) else {}
        statuses = tuple(
            RecipientStatus("delivered", "2.0.0", str(delivery.get("smtpResponse") or ""), str(r))
            for r in delivery.get("recipients") or ()
        )
        return DeliveryReport(
            "amazonses.com", statuses or (RecipientStatus("delivered", "2.0.0", ""),), tokens
        )
    return None


def _notification(message: email.message.Message) -> dict[str, Any] | None:
    for part in mime.own_parts(message):
        if part.get_content_type() != "text/plain":
            continue
        text = mime.text(part).strip()
        if not text.startswith("{") or len(text) > MAX_CHARS:
            continue
        try:
            found, _ = json.JSONDecoder(strict=False).raw_decode(text)  # lines wrapped in strings
        except ValueError:
            continue
        if isinstance(found, dict) and ("notificationType" in found or "eventType" in found):
            return found
    return None


def _tokens(mail: dict[str, Any]) -> tuple[str, ...]:
    """The original's ``X-Layang-Id`` and Return-Path, from the headers SES includes."""
    tokens = []
    for header in mail.get("headers") or ():
        if not isinstance(header, dict):
            continue
        name = str(header.get("name") or "").lower()
        if name in ("return-path", "x-layang-id"):
            tokens.append(str(header.get("value") or "").strip("<> "))
    source = mail.get("source")
    if isinstance(source, str) and source.startswith("b+"):
        tokens.append(source)
    return tuple(t for t in tokens if t)
