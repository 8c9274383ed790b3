"""Automatic replies (RFC 3834): vacation notices and autoresponders that answer our mail.

They say nothing about the address (it exists: someone set up the reply), so they are neither
a bounce nor a complaint. Read after the bounce readers, because a bounce is "auto-replied"
too. RFC 3834 §5 marks them ``Auto-Submitted: auto-replied``; many responders predate it and
say so with their own fields or a subject.
"""

from __future__ import annotations

import email.message
import re

from layang.domain.feedback import AutoReply
from layang.inbound import report_parts as mime

# Fields responders set instead of (or besides) Auto-Submitted.
_RESPONDER_FIELDS = ("X-Autoreply", "X-Autorespond", "X-Autoresponse", "X-Vacation")
_SUBJECT = re.compile(
    r"^\s*(?:auto(?:matic|matische)?[- ]?(?:reply|response|antwort)|auto:|"
    r"out of (?:the )?office|away until|on vacation|vacation|abwesenheit|"
    r"r[ée]ponse automatique|respuesta autom[aá]tica|risposta automatica)",
    re.IGNORECASE,
)


def read_auto_reply(message: email.message.Message) -> AutoReply | None:
    """The auto-reply ``message`` is, or ``None``."""
    submitted = mime.value(message, "Auto-Submitted").lower()
    precedence = mime.value(message, "Precedence").lower()
    said = (
        submitted.startswith("auto-replied")
        or precedence == "auto_reply"
        or any(message.get(name) is not None for name in _RESPONDER_FIELDS)
        or mime.value(message, "X-Apple-Action").upper() == "VACATION"
        or _SUBJECT.search(mime.decoded(message, "Subject")) is not None
    )
    if not said:
        return None
    return AutoReply(
        reported_by=mime.sender_host(message),
        subject=mime.decoded(message, "Subject")[:200],
        original_tokens=mime.original_tokens(mime.own_parts(message)),
    )
