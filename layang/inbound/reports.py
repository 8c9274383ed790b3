"""Reading inbound mail into the reports of :mod:`layang.domain.feedback`.

- RFC 3464 delivery status notifications (``multipart/report;
  report-type=delivery-status``), read with the stdlib parser: per recipient its Action,
  Status, Diagnostic-Code and Final-Recipient;
- the common non-standard bounces (qmail, Exim, Postfix's and Exchange's old formats…), when
  the standard reading finds nothing: flufl.bounce (GNU Mailman's detectors) says whether a
  failure is permanent or temporary, and the diagnostic is the remote server's reply found in
  the text;
- RFC 5965 feedback reports (``report-type=feedback-report``): complaints.

Anything else, and anything that cannot be parsed at all, is ``Unrecognised`` with the reason.
Before anything is parsed, the message's MIME structure is measured by a scan of its bytes: one
with more than ``MAX_PARTS`` parts or ``MAX_DEPTH`` levels of nesting is not parsed (a report
has three parts, two levels deep; the parser's cost grows with the parts). Nothing here raises
on any input: mail comes from anyone.
"""

from __future__ import annotations

import email
import email.message
import email.policy
import logging
import re
from email.parser import HeaderParser

from flufl.bounce import all_failures

from layang.domain.feedback import (
    DELAYED,
    FAILED,
    DeliveryReport,
    FeedbackReport,
    RecipientStatus,
    Report,
    Unrecognised,
)

MAX_PARTS = 100
"""Parts a message may have to be parsed: a report has three; more is not a report."""
MAX_DEPTH = 10
"""Levels of nesting (multiparts and attached messages) a message may have to be parsed."""
_TEXT_SCANNED = 64 * 1024
_SMTP_REPLY = re.compile(r"(?<![\d.])[45]\d\d[ -](?:[245]\.\d{1,3}\.\d{1,3}\b)?[^\r\n]*")
_QMAIL_STATUS = re.compile(r"[^\r\n]*\(#[45]\.\d{1,3}\.\d{1,3}\)[^\r\n]*")
_ENHANCED = re.compile(r"(?<![\d.])([245]\.\d{1,3}\.\d{1,3})(?![\d.])")
_ADDRESS = re.compile(r"<?([^<>\s]+@[^<>\s]+)>?")
_TOKEN = re.compile(r"^[a-z2-7]{42}$", re.IGNORECASE)

# flufl.bounce logs every detector it runs at INFO, and a traceback for each one that trips on
# odd mail (which only means "not this format"): a log line per detector per message.
logging.getLogger("flufl.bounce").setLevel(logging.CRITICAL)


_BLANK_LINE = re.compile(rb"\r?\n\r?\n")
_DELIMITER = re.compile(rb"^--([^\r\n]*?)[ \t]*\r?$", re.M)
_CONTENT_TYPE = re.compile(
    rb"^content-type[ \t]*:[ \t]*([^;\s]*)((?:[^\r\n]|\r?\n[ \t])*)", re.I | re.M
)
_BOUNDARY = re.compile(rb"""boundary[ \t]*=[ \t]*(?:"([^"]*)"|([^;\s]+))""", re.I)


def _header_block(data: bytes, start: int) -> tuple[int, bytes, bytes | None]:
    """(where the body starts, the content type, the boundary) of the header block at
    ``start``."""
    if data.startswith((b"\r\n", b"\n"), start):
        return start + (2 if data[start] == 13 else 1), b"", None
    blank = _BLANK_LINE.search(data, start)
    end, body = (blank.start(), blank.end()) if blank else (len(data), len(data))
    found = _CONTENT_TYPE.search(data, start, end)
    if found is None:
        return body, b"", None
    kind = found.group(1).lower()
    boundary = _BOUNDARY.search(found.group(2)) if kind.startswith(b"multipart/") else None
    value = None if boundary is None else (boundary.group(1) or boundary.group(2))
    return body, kind, value or None


def mime_shape_problem(
    data: bytes, max_parts: int = MAX_PARTS, max_depth: int = MAX_DEPTH
) -> str | None:
    """Why ``data`` has too many MIME parts or too deep a nesting to be parsed, or None.

    A scan of the bytes with compiled patterns, as MIME reads them (RFC 2046 delimiters,
    ``message/rfc822`` bodies being messages), stopping as soon as a limit is passed: its cost
    does not grow with what an attacker packs into the message.
    """
    open_levels: list[bytes | None] = []  # a multipart's boundary, or None for a message
    parts = 0
    position = 0
    while True:
        parts += 1
        if parts > max_parts:
            return f"more than {max_parts} MIME parts; kept unparsed"
        position, kind, boundary = _header_block(data, position)
        if boundary is not None or kind in (b"message/rfc822", b"message/global"):
            open_levels.append(boundary)
            if len(open_levels) > max_depth:
                return f"MIME nested more than {max_depth} levels deep; kept unparsed"
            if boundary is None:
                continue  # the body is a message: its header block follows at once
        boundaries = [b for b in open_levels if b is not None]
        while True:
            if not boundaries:
                return None
            found = _DELIMITER.search(data, position)
            if found is None:
                return None
            position = found.end()
            text = found.group(1)
            closing = text.endswith(b"--") and text[:-2] in boundaries
            name = text[:-2] if closing else text
            if name not in boundaries:
                continue
            level = max(i for i, b in enumerate(open_levels) if b == name)
            del open_levels[level + (0 if closing else 1) :]
            boundaries = [b for b in open_levels if b is not None]
            if not closing:
                position += 2 if data.startswith(b"\r\n", position) else 1
                break


def read_report(data: bytes) -> Report:
    """What ``data`` (a whole message as received) reports. Never raises."""
    problem = mime_shape_problem(data)
    if problem is not None:
        return Unrecognised(problem)
    try:
        message = email.message_from_bytes(data, policy=email.policy.compat32)
        return _read(message)
    except Exception as error:  # malformed mail of any kind is only unrecognised
        return Unrecognised(f"could not be parsed: {type(error).__name__}")


def _read(message: email.message.Message) -> Report:
    parts = _parts(message)
    for part in parts:
        if part.get_content_type() != "multipart/report":
            continue
        report_type = str(part.get_param("report-type", "") or "").lower()
        if report_type == "delivery-status":
            report = _delivery_status(message, part)
            if report is not None:
                return report
        elif report_type == "feedback-report":
            report = _feedback(message, part)
            if report is not None:
                return report
    return _non_standard(message, parts)


def _parts(message: email.message.Message) -> list[email.message.Message]:
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


def _children(part: email.message.Message) -> list[email.message.Message]:
    payload = part.get_payload()
    if not isinstance(payload, list):
        return []
    return [p for p in payload if isinstance(p, email.message.Message)]


def _blocks(part: email.message.Message) -> list[email.message.Message]:
    """The header blocks of a ``message/delivery-status`` or ``message/feedback-report``
    part, whether the parser split them or left the text."""
    payload = part.get_payload()
    if isinstance(payload, list):
        return [p for p in payload if isinstance(p, email.message.Message)]
    text = _text(part)
    return [
        HeaderParser(policy=email.policy.compat32).parsestr(block.strip() + "\n")
        for block in re.split(r"\r?\n\s*\r?\n", text)
        if block.strip()
    ]


def _value(block: email.message.Message, name: str) -> str:
    value = block.get(name)
    if value is None:
        return ""
    return " ".join(str(value).split())


def _typed(value: str) -> str:
    """``dns; mx.example`` → ``mx.example``; ``smtp; 550 …`` → ``550 …``."""
    kind, sep, rest = value.partition(";")
    return rest.strip() if sep and " " not in kind.strip() else value.strip()


def _delivery_status(
    message: email.message.Message, report: email.message.Message
) -> DeliveryReport | None:
    children = _children(report)
    status_part = next(
        (p for p in children if p.get_content_type() == "message/delivery-status"), None
    )
    if status_part is None:
        return None
    blocks = _blocks(status_part)
    if not blocks:
        return None
    reporting = _typed(_value(blocks[0], "Reporting-MTA"))
    statuses = []
    for block in blocks:
        action = _value(block, "Action").lower()
        if not action:
            continue
        status = _value(block, "Status")
        match = _ENHANCED.search(status)
        statuses.append(
            RecipientStatus(
                action=action,
                status=match.group(1) if match else status[:32],
                diagnostic=_typed(_value(block, "Diagnostic-Code")),
                final_recipient=_typed(_value(block, "Final-Recipient")),
            )
        )
    if not statuses:
        return None
    return DeliveryReport(
        reported_by=reporting or _sender_host(message),
        statuses=tuple(statuses),
        original_tokens=_original_tokens(children),
    )


def _feedback(
    message: email.message.Message, report: email.message.Message
) -> FeedbackReport | None:
    children = _children(report)
    fields_part = next(
        (p for p in children if p.get_content_type() == "message/feedback-report"), None
    )
    if fields_part is None:
        return None
    blocks = _blocks(fields_part)
    fields = blocks[0] if blocks else None
    if fields is None:
        return None
    tokens = []
    original_from = _value(fields, "Original-Mail-From")
    if original_from:
        tokens.append(original_from.strip("<>"))
    reporting = _typed(_value(fields, "Reporting-MTA"))
    return FeedbackReport(
        feedback_type=_value(fields, "Feedback-Type").lower() or "abuse",
        reported_by=reporting or _sender_host(message),
        user_agent=_value(fields, "User-Agent")[:200],
        original_tokens=(*tokens, *_original_tokens(children)),
    )


def _original_tokens(children: list[email.message.Message]) -> tuple[str, ...]:
    """VERP addresses and ``X-Layang-Id`` tokens of the embedded original, if any: its
    Return-Path first (the receiving server wrote it from our envelope), then the header."""
    tokens: list[str] = []
    for part in children:
        kind = part.get_content_type()
        if kind == "message/rfc822":
            inner = _children(part)
            headers = inner[0] if inner else None
        elif kind == "text/rfc822-headers":
            headers = HeaderParser(policy=email.policy.compat32).parsestr(_text(part))
        else:
            continue
        if headers is None:
            continue
        for value in headers.get_all("Return-Path") or ():
            match = _ADDRESS.search(str(value))
            if match:
                tokens.append(match.group(1))
        # Only the first: the worker puts its own on top of whatever the message had.
        first = headers.get("X-Layang-Id")
        if first is not None and _TOKEN.match(str(first).strip()):
            tokens.append(str(first).strip())
    return tuple(tokens)


def _non_standard(message: email.message.Message, parts: list[email.message.Message]) -> Report:
    try:
        temporary, permanent = all_failures(message)
    except Exception:  # a detector tripping on odd mail means "not a bounce"
        temporary, permanent = frozenset(), frozenset()
    if not permanent and not temporary:
        return Unrecognised("not a delivery status or feedback report")
    action = FAILED if permanent else DELAYED
    text = "\n".join(
        _text(p) for p in parts if p.get_content_maintype() == "text" and not p.is_multipart()
    )[:_TEXT_SCANNED]
    diagnostic = _diagnostic(text)
    match = _ENHANCED.search(diagnostic)
    status = match.group(1) if match else ("5.0.0" if action == FAILED else "4.0.0")
    final = next(iter(permanent or temporary))
    return DeliveryReport(
        reported_by=_sender_host(message),
        statuses=(
            RecipientStatus(
                action=action,
                status=status,
                diagnostic=diagnostic,
                final_recipient=final.decode("utf-8", "replace"),
            ),
        ),
        original_tokens=_original_tokens(_children(message) if message.is_multipart() else []),
    )


def _diagnostic(text: str) -> str:
    """The remote server's words in a bounce's text: its SMTP reply, or qmail's ``(#5.x.x)``
    line."""
    for pattern in (_SMTP_REPLY, _QMAIL_STATUS):
        match = pattern.search(text)
        if match:
            return " ".join(match.group(0).split())
    return ""


def _text(part: email.message.Message) -> str:
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):
        raw = part.get_payload()
        return raw if isinstance(raw, str) else ""
    charset = part.get_content_charset() or "utf-8"
    try:
        return payload.decode(charset, "replace")
    except LookupError:
        return payload.decode("utf-8", "replace")


def _sender_host(message: email.message.Message) -> str:
    """The host part of the report's From (``MAILER-DAEMON@mx.example`` → ``mx.example``)."""
    match = _ADDRESS.search(str(message.get("From", "")))
    return match.group(1).rpartition("@")[2][:253] if match else ""
