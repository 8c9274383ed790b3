"""Reading back the message an activity record was about: its headers, text, HTML and
attachments, as they were relayed."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from urllib.parse import unquote

from layang.clock import iso_ms
from layang.domain.errors import ContentExpired, MessageUnavailable, NotFound
from layang.mail.compose import compose_message
from layang.mail.message import OutgoingMessage
from layang.models import Account, Recipient, Transmission

_CID_URL = re.compile(r"cid:([^\s\"'()<>]+)", re.IGNORECASE)


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
    worker builds, without per-recipient tracking and before DKIM signing). ``images`` maps the
    Content-ID of each image part to a ``data:`` URL of it."""

    record_id: str
    headers: tuple[tuple[str, str], ...]
    text: str | None
    html: str | None
    attachments: tuple[AttachedFile, ...]
    rebuilt: bool
    images: Mapping[str, str] = field(default_factory=dict)

    def html_with_images(self) -> str | None:
        """The HTML with each ``cid:`` reference to an image of the message replaced by a
        ``data:`` URL of it, so it shows without fetching anything."""
        if self.html is None or not self.images:
            return self.html

        def inline(match: re.Match[str]) -> str:
            return self.images.get(unquote(match.group(1)), match.group(0))

        return _CID_URL.sub(inline, self.html)


def get_message_view(account: Account, record_id: str) -> MessageView:
    """The message behind the activity record ``record_id`` of ``account``. Reads only.

    Raises ``NotFound`` for an unknown record or another account's, ``ContentExpired`` when
    retention removed the content, and ``MessageUnavailable`` when the message is not stored or
    cannot be built again (the worker bounced it for that reason)."""
    row = (
        Transmission.select(
            Transmission.raw,
            Transmission.payload,
            Transmission.message_id,
            Transmission.content_expired_at,
        )
        .join(Recipient)
        .where((Recipient.id == record_id) & (Recipient.account == account.id))
        .first()
    )
    if row is None:
        raise NotFound(f"No activity record {record_id!r}.")
    if row.content_expired_at is not None:
        raise ContentExpired(
            f"The message's content has expired: it was removed on "
            f"{iso_ms(row.content_expired_at)[:10]}, as the account's retention settings say. "
            "The record and its events are kept."
        )
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
    images = {}
    for part in message.walk():
        content_id = (part.get("Content-ID") or "").strip("<> ")
        if content_id and part.get_content_maintype() == "image" and id(part) not in bodies:
            data = base64.b64encode(part.get_payload(decode=True) or b"").decode()
            images[content_id] = f"data:{part.get_content_type()};base64,{data}"
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
        images=images,
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
