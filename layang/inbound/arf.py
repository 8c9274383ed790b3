"""Complaints: RFC 5965 feedback reports (ARF, ``message/feedback-report``), and the
complaints some providers still send as a plain message with the original attached."""

from __future__ import annotations

import email.message
import re

from layang.domain.feedback import FeedbackReport
from layang.inbound import report_parts as mime

FEEDBACK_TYPE = "message/feedback-report"
# A complaint without ARF's fields: a person's or a provider's message about ours, attached.
_COMPLAINT_SUBJECT = re.compile(r"\b(?:complaint|abuse report|spam report)\b", re.IGNORECASE)


def read_arf(message: email.message.Message) -> FeedbackReport | None:
    """The complaint ``message`` is, or ``None``."""
    found = mime.own_parts(message)
    fields_part = next((p for p in found if p.get_content_type() == FEEDBACK_TYPE), None)
    if fields_part is None:
        return _plain_complaint(message, found)
    blocks = mime.header_blocks(fields_part)
    if not blocks:
        return None
    fields = blocks[0]
    tokens = []
    original_from = mime.value(fields, "Original-Mail-From")
    if original_from:
        tokens.append(original_from.strip("<>"))
    reporting = mime.typed(mime.value(fields, "Reporting-MTA"))
    return FeedbackReport(
        feedback_type=mime.value(fields, "Feedback-Type").lower() or "abuse",
        reported_by=reporting or mime.sender_host(message),
        user_agent=mime.value(fields, "User-Agent")[:200],
        original_tokens=(*tokens, *mime.original_tokens(found)),
    )


def _plain_complaint(
    message: email.message.Message, found: list[email.message.Message]
) -> FeedbackReport | None:
    attached = any(p.get_content_type() in mime.ORIGINAL_MESSAGE for p in found)
    if not attached or not _COMPLAINT_SUBJECT.search(mime.value(message, "Subject")):
        return None
    return FeedbackReport(
        feedback_type="abuse",
        reported_by=mime.sender_host(message),
        user_agent="",
        original_tokens=mime.original_tokens(found),
    )
