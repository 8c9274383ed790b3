"""What every report reader needs of a parsed message: its parts, their text, header fields,
and the VERP tokens of the original message a report carries back."""

from __future__ import annotations

import email.message
import email.policy
import re
from email.header import decode_header, make_header
from email.parser import HeaderParser

from selectolax.lexbor import LexborHTMLParser

from layang.mail.mime_shape import MAX_PARTS

_ADDRESS = re.compile(r"<?([^<>\s]+@[^<>\s]+)>?")
_TOKEN = re.compile(r"^[a-z2-7]{42}$", re.IGNORECASE)
# The original message's types: RFC 3462/6522 and RFC 6533's internationalised forms.
ORIGINAL_MESSAGE = ("message/rfc822", "message/global")
ORIGINAL_HEADERS = ("text/rfc822-headers", "message/global-headers")


def parts(message: email.message.Message) -> list[email.message.Message]:
    """Every part, depth first, without recursion (a message can nest thousands deep)."""
    found = []
    stack = [message]
    while stack and len(found) < MAX_PARTS:
        part = stack.pop()
        found.append(part)
        payload = part.get_payload()
        if isinstance(payload, list):
            stack.extend(reversed([p for p in payload if isinstance(p, email.message.Message)]))
    return found


def children(part: email.message.Message) -> list[email.message.Message]:
    payload = part.get_payload()
    if not isinstance(payload, list):
        return []
    return [p for p in payload if isinstance(p, email.message.Message)]


def own_parts(message: email.message.Message) -> list[email.message.Message]:
    """The parts the reporting server wrote: every part but those of an attached message."""
    found = []
    stack = [message]
    while stack and len(found) < MAX_PARTS:
        part = stack.pop()
        found.append(part)
        if part is not message and part.get_content_type() in ORIGINAL_MESSAGE:
            continue
        stack.extend(reversed(children(part)))
    return found


def value(block: email.message.Message, name: str) -> str:
    """A header field's value, unfolded, ``""`` when absent."""
    found = block.get(name)
    if found is None:
        return ""
    written = str(found)
    if any("\udc80" <= c <= "\udcff" for c in written):
        # Raw 8-bit bytes, kept by the parser as surrogates: UTF-8 in RFC 6533's fields.
        written = written.encode("ascii", "surrogateescape").decode("utf-8", "replace")
    return " ".join(written.split())


def decoded(block: email.message.Message, name: str) -> str:
    """A header field's value with its RFC 2047 encoded-words decoded."""
    written = value(block, name)
    if "=?" not in written:
        return written
    try:
        return str(make_header(decode_header(written)))
    except (ValueError, LookupError, UnicodeError):
        return written


def typed(field: str) -> str:
    """``dns; mx.example`` → ``mx.example``; ``smtp; 550 …`` → ``550 …`` (RFC 3464 §2.1.2)."""
    kind, sep, rest = field.partition(";")
    return rest.strip() if sep and " " not in kind.strip() else field.strip()


def text(part: email.message.Message) -> str:
    """A part's decoded text (HTML as the text a reader sees)."""
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        raw = part.get_payload()
        decoded = raw if isinstance(raw, str) else ""
    else:
        charset = part.get_content_charset() or "utf-8"
        try:
            decoded = payload.decode(charset, "replace")
        except LookupError:
            decoded = payload.decode("utf-8", "replace")
    if part.get_content_type() == "text/html":
        body = LexborHTMLParser(decoded).body
        return body.text(separator="\n") if body is not None else ""
    return decoded


def header_blocks(part: email.message.Message) -> list[email.message.Message]:
    """The header blocks of a ``message/delivery-status`` (or global) or
    ``message/feedback-report`` part, whether the parser split them or left the text."""
    payload = part.get_payload()
    if isinstance(payload, list):
        blocks = [p for p in payload if isinstance(p, email.message.Message)]
        if len(blocks) != 1 or not isinstance(blocks[0].get_payload(), str):
            return blocks
        # The stdlib splits only message/delivery-status into blocks: another type (RFC 6533's
        # global one) is read as one message, its first block the headers, the rest its body.
        rest = blocks[0].get_payload(decode=True)
        written = rest.decode("utf-8", "replace") if isinstance(rest, bytes) else ""
        return [blocks[0], *_split_blocks(written)]
    return _split_blocks(text(part))


def _split_blocks(written: str) -> list[email.message.Message]:
    return [
        HeaderParser(policy=email.policy.compat32).parsestr(block.strip() + "\n")
        for block in re.split(r"\r?\n\s*\r?\n", written)
        if block.strip()
    ]


def original_tokens(found: list[email.message.Message]) -> tuple[str, ...]:
    """VERP addresses and ``X-Layang-Id`` tokens of the embedded original, if any: its
    Return-Path first (the receiving server wrote it from our envelope), then the header."""
    tokens: list[str] = []
    for part in found:
        kind = part.get_content_type()
        if kind in ORIGINAL_MESSAGE:
            inner = children(part)
            headers = inner[0] if inner else None
        elif kind in ORIGINAL_HEADERS:
            headers = HeaderParser(policy=email.policy.compat32).parsestr(text(part))
        else:
            continue
        if headers is None:
            continue
        for field in headers.get_all("Return-Path") or ():
            match = _ADDRESS.search(str(field))
            if match:
                tokens.append(match.group(1))
        # Only the first: the worker puts its own on top of whatever the message had.
        first = headers.get("X-Layang-Id")
        if first is not None and _TOKEN.match(str(first).strip()):
            tokens.append(str(first).strip())
    return tuple(tokens)


def sender_host(message: email.message.Message) -> str:
    """The host part of the report's From (``MAILER-DAEMON@mx.example`` → ``mx.example``)."""
    match = _ADDRESS.search(str(message.get("From", "")))
    return match.group(1).rpartition("@")[2][:253] if match else ""


# Content-filtering gateways that write their own notices: SurfControl, m-FILTER (X-Mailer),
# MailFoundry (its Received line), ActiveHunter (X-AHMAILID).
_FILTER_PRODUCTS = re.compile(r"surfcontrol|m-filter|mailfoundry", re.IGNORECASE)


def from_content_filter(message: email.message.Message) -> bool:
    """Whether ``message`` was written by a content-filtering gateway."""
    if message.get("X-AHMAILID") is not None:
        return True
    if _FILTER_PRODUCTS.search(value(message, "X-Mailer")):
        return True
    return any(_FILTER_PRODUCTS.search(str(r)) for r in message.get_all("Received") or ())
