"""What happened to each recipient of a delivery attempt: the outcome vocabulary every transport
speaks and the worker records.

An outcome is one of three (``delivered``, ``deferred``: try again later, ``bounced``: never try
again), read from the SMTP reply code (RFC 5321 section 4.2.1: 2xx, 4xx, 5xx); ``code`` is 0 when
there was no reply to go by (a network failure, a timeout, a local error). Transports never
raise for delivery problems: every recipient gets a :class:`RecipientResult`.
"""

from __future__ import annotations

from collections.abc import Sequence
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


def code_of(reply: str) -> int:
    """The reply code ``reply`` (see :func:`format_reply`) starts with, or 0 when it has none."""
    return int(reply[:3]) if reply[:3].isdigit() else 0


def results_for_all(
    recipients: Sequence[str], code: int, reply: str, outcome: str | None = None
) -> list[RecipientResult]:
    """The same reply for every recipient, in order (see :func:`result_for`)."""
    return [result_for(r, code, reply, outcome) for r in recipients]


def answer_the_rest(
    results: list[RecipientResult | None], recipients: Sequence[str], code: int, reply: str
) -> None:
    """Give every recipient without a result yet (None in ``results``, indexed as
    ``recipients``) one from this reply."""
    for index, result in enumerate(results):
        if result is None:
            results[index] = result_for(recipients[index], code, reply)


def deferring_the_rest(
    recipients: Sequence[str], results: list[RecipientResult | None], code: int, reply: str
) -> list[RecipientResult]:
    """``results`` complete: every recipient without one yet is deferred with this reply."""
    return [
        result if result is not None else RecipientResult(recipients[i], code, reply, DEFERRED)
        for i, result in enumerate(results)
    ]
