"""The mail the console sends to people (invitations, password resets, lockouts), queued through
the same pipeline as every message, so that it shows in the account's Activity."""

from __future__ import annotations

import html
from urllib.parse import urlsplit

from layang.config import Config
from layang.mail.message import Mailbox, OutgoingMessage
from layang.mail.outbox import queue_message
from layang.models import Account


def _sender(config: Config) -> Mailbox:
    host = urlsplit(config.public_url).hostname or "localhost"
    return Mailbox(config.console_mail_from or f"no-reply@{host}", "Layang")


def send(account: Account, to: str, subject: str, text: str, purpose: str, config: Config) -> str:
    """Queue ``text`` (paragraphs between blank lines; an HTML part is made of it) to ``to``
    from ``LAYANG_CONSOLE_MAIL_FROM`` (or no-reply at the public host), in ``account``, with
    ``purpose`` as its metadata; returns the transmission's id."""
    paragraphs = "".join(f"<p>{html.escape(p)}</p>" for p in text.strip().split("\n\n"))
    message = OutgoingMessage(
        sender=_sender(config),
        to=(Mailbox(to, None),),
        subject=subject,
        text=text,
        html=f"<!DOCTYPE html><html><body>{paragraphs}</body></html>",
    )
    return queue_message(account, message, {"purpose": purpose}, source="console")
