"""Reading back the message an activity record was about: its headers, text, HTML and
attachments, as they were relayed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser

from layang.domain.errors import MessageUnavailable, NotFound
from layang.models import Account, Recipient, Transmission
from layang.sending.compose import compose_message
from layang.sending.message import OutgoingMessage


@dataclass(frozen=True, slots=True)
class AttachedFile:
    """A part that is neither the text nor the HTML body; ``size`` is decoded bytes."""

    filename: str
    media_type: str
    size: int
    content_id: str | None


@dataclass(frozen=True, slots=True)
class MessageView:
    """The message of one activity record. ``headers`` are (name, decoded value) in order;
    ``text``/``html`` the first such part (None when absent); ``rebuilt`` says the bytes were
    composed again from the stored message rather than read as stored (the same bytes the
    worker builds, without per-recipient tracking and before DKIM signing)."""

    record_id: str
    headers: tuple[tuple[str, str], ...]
    text: str | None
    html: str | None
    attachments: tuple[AttachedFile, ...]
    rebuilt: bool


def get_message_view(account: Account, record_id: str) -> MessageView:
    """The message behind the activity record ``record_id`` of ``account``. Reads only.

    Raises ``NotFound`` for an unknown record or another account's, and
    ``MessageUnavailable`` when the message is not stored or cannot be built again (the
    worker bounced it for that reason)."""
    row = (
        Transmission.select(Transmission.raw, Transmission.payload, Transmission.message_id)
        .join(Recipient)
        .where((Recipient.id == record_id) & (Recipient.account == account.id))
        .first()
    )
    if row is None:
        raise NotFound(f"No activity record {record_id!r}.")
    if row.raw is not None:
        raw, rebuilt = bytes(row.raw), False
    elif row.payload is not None:
        try:
            message = OutgoingMessage.from_payload(json.loads(row.payload))
            raw, rebuilt = compose_message(message, row.message_id), True
        except (ValueError, KeyError, TypeError) as error:
            raise MessageUnavailable(f"The message cannot be built: {error}") from None
    else:
        raise MessageUnavailable("The message is not stored.")
    return parse_message(record_id, raw, rebuilt=rebuilt)


def parse_message(record_id: str, raw: bytes, *, rebuilt: bool = False) -> MessageView:
    """Read MIME bytes into a :class:`MessageView`. Never raises on malformed mail: what
    cannot be decoded is shown with replacement characters."""
    message = BytesParser(policy=policy.default).parsebytes(raw)
    # items() keeps the order and repeated headers (Received, custom ones); values come
    # decoded (RFC 2047) and are unfolded for reading.
    headers = tuple((name, " ".join(str(value).split())) for name, value in message.items())
    text_part = message.get_body(preferencelist=("plain",))
    html_part = message.get_body(preferencelist=("html",))
    bodies = {id(part) for part in (text_part, html_part) if part is not None}
    attachments = tuple(
        AttachedFile(
            filename=str(part.get_filename() or ""),
            media_type=part.get_content_type(),
            size=len(part.get_payload(decode=True) or b""),
            content_id=(part.get("Content-ID") or "").strip("<> ") or None,
        )
        for part in message.walk()
        if not part.is_multipart() and id(part) not in bodies
    )
    return MessageView(
        record_id=record_id,
        headers=headers,
        text=_content(text_part),
        html=_content(html_part),
        attachments=attachments,
        rebuilt=rebuilt,
    )


def _content(part: EmailMessage | None) -> str | None:
    if part is None:
        return None
    data = part.get_payload(decode=True) or b""
    charset = part.get_content_charset() or "utf-8"
    try:
        return data.decode(charset, "replace")
    except LookupError:  # an unknown charset name
        return data.decode("utf-8", "replace")
