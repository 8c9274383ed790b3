"""Reading routed inbound mail into what its endpoint is sent: addresses, text, HTML, the reply
without its quoted history, headers and attachments, every name and text decoded to Unicode.

Runs in the parsing children of :mod:`layang.inbound.parsing` (mail comes from anyone): the MIME
shape is measured first (``mime_shape_problem``: section 15's 100 parts and 10 levels), and a
message over it, or one the parser cannot read, is still a ``ReceivedMail``, with its headers
when they can be read and ``problem`` saying what went wrong. Nothing here raises on any input.

Header words (RFC 2047) and parameter values (RFC 2231, continuations and charsets) are decoded
by the standard library's ``email.policy.default``; bodies are converted from their declared
charset to UTF-8, an unknown or wrong charset read as Latin-1 after a failed UTF-8 attempt (so
no byte is lost). The reply is stripped of its quoted history by ``mail-parser-reply``, which
knows the quoting of Gmail, Outlook and Apple Mail in several languages.
"""

from __future__ import annotations

import email
import email.message
import email.parser
import email.policy
import email.utils
from dataclasses import dataclass, field

from layang.mail.mime_shape import mime_shape_problem

MAX_HEADERS = 500
"""Header fields given to the endpoint, at most (the rest are in the raw message)."""


@dataclass(frozen=True, slots=True)
class Address:
    email: str
    name: str


@dataclass(frozen=True, slots=True)
class Attachment:
    """One attachment, decoded from its transfer encoding; ``filename`` may be empty."""

    filename: str
    content_type: str
    content_id: str | None
    content: bytes


@dataclass(frozen=True, slots=True)
class ReceivedMail:
    """A routed message as read. ``problem`` says why the body could not be read (then only
    what could be is here)."""

    from_: Address | None = None
    to: tuple[Address, ...] = ()
    cc: tuple[Address, ...] = ()
    reply_to: tuple[Address, ...] = ()
    subject: str = ""
    message_id: str | None = None
    in_reply_to: str | None = None
    references: tuple[str, ...] = ()
    date: str | None = None
    text: str = ""
    html: str = ""
    stripped_text_reply: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    attachments: tuple[Attachment, ...] = field(default=())
    problem: str | None = None


def _header(message: email.message.Message, name: str) -> str | None:
    try:
        value = message.get(name)
        return None if value is None else str(value).strip()
    except Exception:  # a broken encoded word: the raw value
        raw = message.get_all(name, failobj=[None])
        return None if raw[0] is None else str(raw[0])


def _addresses(message: email.message.Message, name: str) -> tuple[Address, ...]:
    try:
        values = [str(v) for v in message.get_all(name, [])]
    except Exception:
        return ()
    return tuple(
        Address(email=address, name=display)
        for display, address in email.utils.getaddresses(values)
        if address
    )


def _ids(value: str | None) -> tuple[str, ...]:
    return tuple(value.split()) if value else ()


def _text_of(part: email.message.Message) -> str:
    """The part's text in Unicode, lines ending in ``\n``."""
    payload = part.get_payload(decode=True) or b""
    charset = part.get_content_charset() or "utf-8"
    try:
        text = payload.decode(charset)
    except (LookupError, UnicodeDecodeError):
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            text = payload.decode("latin-1")
    return text.replace("\r\n", "\n")


def _headers(message: email.message.Message) -> tuple[tuple[str, str], ...]:
    found = []
    for name, value in list(message.items())[:MAX_HEADERS]:
        try:
            found.append((name, str(value)))
        except Exception:
            found.append((name, "(could not be decoded)"))
    return tuple(found)


def _leaves(
    part: email.message.Message, inside_attachment: bool = False
) -> list[tuple[email.message.Message, bool]]:
    """Every part that is not a container, and whether it is an attachment by disposition;
    an attached message is one attachment, not its parts."""
    if part.is_multipart() and part.get_content_maintype() == "multipart":
        found: list[tuple[email.message.Message, bool]] = []
        for child in part.get_payload():
            found += _leaves(child)
        return found
    disposition = (part.get_content_disposition() or "").lower()
    return [(part, inside_attachment or disposition == "attachment")]


def _attachment(part: email.message.Message) -> Attachment:
    if part.get_content_maintype() == "message":
        inner = part.get_payload()
        content = inner[0].as_bytes() if isinstance(inner, list) and inner else b""
    else:
        content = part.get_payload(decode=True) or b""
    try:
        filename = part.get_filename() or ""
    except Exception:
        filename = ""
    content_id = part.get("Content-ID")
    return Attachment(
        filename=str(filename),
        content_type=part.get_content_type(),
        content_id=str(content_id).strip().strip("<>") if content_id else None,
        content=content,
    )


def strip_reply(text: str) -> str:
    """``text`` without the quoted message it replies to (and the client's "wrote:" line)."""
    if not text.strip():
        return ""
    from mailparser_reply import EmailReplyParser

    try:
        return (
            EmailReplyParser(languages=["en", "de", "fr", "es", "nl", "it"])
            .parse_reply(text=text)
            .strip()
        )
    except Exception:
        return text.strip()


def _html_as_text(html: str) -> str:
    from inscriptis import get_text

    try:
        return get_text(html).strip()
    except Exception:
        return ""


def read_received(data: bytes) -> ReceivedMail:
    """What the endpoint is told of ``data`` (a whole message as received). Never raises."""
    problem = mime_shape_problem(data)
    try:
        if problem is not None:
            headers = email.parser.BytesHeaderParser(policy=email.policy.default)
            return _read(headers.parsebytes(data), with_body=False, problem=problem)
        message = email.message_from_bytes(data, policy=email.policy.default)
        return _read(message, with_body=True, problem=None)
    except Exception as error:
        return ReceivedMail(problem=f"could not be parsed: {type(error).__name__}")


def _read(message: email.message.Message, *, with_body: bool, problem: str | None) -> ReceivedMail:
    from_ = _addresses(message, "From")
    text = html = ""
    attachments: list[Attachment] = []
    if with_body:
        for part, attached in _leaves(message):
            kind = part.get_content_type()
            if not attached and kind == "text/plain" and not text:
                text = _text_of(part)
            elif not attached and kind == "text/html" and not html:
                html = _text_of(part)
            else:  # a second text body is kept as an attachment, not lost
                attachments.append(_attachment(part))
    reply_source = text or (_html_as_text(html) if html else "")
    return ReceivedMail(
        from_=from_[0] if from_ else None,
        to=_addresses(message, "To"),
        cc=_addresses(message, "Cc"),
        reply_to=_addresses(message, "Reply-To"),
        subject=_header(message, "Subject") or "",
        message_id=_header(message, "Message-ID"),
        in_reply_to=_header(message, "In-Reply-To"),
        references=_ids(_header(message, "References")),
        date=_header(message, "Date"),
        text=text,
        html=html,
        stripped_text_reply=strip_reply(reply_source),
        headers=_headers(message),
        attachments=tuple(attachments),
        problem=problem,
    )
