"""What happened to each recipient of a delivery attempt: the outcome vocabulary every transport
speaks and the worker records.

An outcome is one of three (``delivered``, ``deferred``: try again later, ``bounced``: never try
again), read from the SMTP reply code (RFC 5321 section 4.2.1: 2xx, 4xx, 5xx); ``code`` is 0 when
there was no reply to go by (a network failure, a timeout, a local error). Transports never
raise for delivery problems: every recipient gets a :class:`RecipientResult`.
"""

from __future__ import annotations

from dataclasses import dataclass

DELIVERED = "delivered"
DEFERRED = "deferred"
BOUNCED = "bounced"


@dataclass(frozen=True)
class RecipientResult:
    """What happened to one recipient: the reply ``code`` (0: none), the ``reply`` as one line
    (see :func:`format_reply`) and the ``outcome``."""

    recipient: str
    code: int
    reply: str
    outcome: str


def outcome_for(code: int) -> str:
    """The outcome an SMTP reply code means: 2xx delivered, 5xx bounced, anything else deferred."""
    if 200 <= code < 300:
        return DELIVERED
    if 500 <= code < 600:
        return BOUNCED
    return DEFERRED


def format_reply(code: int, text: bytes | str) -> str:
    """``"<code> <text>"``, the server's text decoded leniently, a multi-line reply on one line."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if "\n" in text or "\r" in text:
        joined = " ".join(line.strip() for line in text.splitlines() if line.strip())
    else:
        joined = text.strip()
    return f"{code} {joined}".strip() if code > 0 else joined


def result_for(
    recipient: str, code: int, reply: str, outcome: str | None = None
) -> RecipientResult:
    """One recipient's result from a server's reply (its outcome from the code unless given);
    a negative code counts as none (0)."""
    code = max(code, 0)
    return RecipientResult(recipient, code, reply, outcome or outcome_for(code))
