"""Multipart reports whose delimiters (RFC 2046 §5.1.1) are not where their Content-Type says:
a delimiter line indented by spaces, a boundary that differs from the declared one (an
anonymiser rewrote one and not the other), or none at all (the report's parts written as one
text). The parser would see a single part and miss the status fields; the report is read as its
writer meant it instead.
"""

from __future__ import annotations

import email
import email.errors
import email.message
import email.policy
import re

_HEAD_ENDS = re.compile(rb"\r?\n\r?\n")
_OPENING = re.compile(rb"^--([^\s]+)[ \t]*\r?$", re.MULTILINE)
_CLOSING = re.compile(rb"^--([^\s]+)--[ \t]*\r?$", re.MULTILINE)


def mended(data: bytes, message: email.message.Message) -> email.message.Message:
    """``message`` (parsed from ``data``) with its multipart delimiters found where they were
    written; ``message`` itself when they were where declared. A multipart with no delimiter
    at all comes back as the text it is."""
    boundary = message.get_boundary() if message.get_content_maintype() == "multipart" else None
    ends = _HEAD_ENDS.search(data)
    if boundary is None or ends is None:
        return message
    head, body = data[: ends.end()], data[ends.end() :]
    declared = re.escape(boundary.encode("ascii", "replace"))
    indented = re.compile(rb"^[ \t]+(--" + declared + rb"(?:--)?[ \t]*\r?)$", re.MULTILINE)
    if indented.search(body):
        return _parse(head + indented.sub(rb"\1", body))
    if not any(isinstance(d, email.errors.StartBoundaryNotFoundDefect) for d in message.defects):
        return message
    closed = {m.group(1) for m in _CLOSING.finditer(body)}
    for opening in _OPENING.finditer(body):
        used = opening.group(1)
        if used in closed:  # the first delimiter that is also closed is the one in use
            return _parse(head.replace(boundary.encode("ascii", "replace"), used, 1) + body)
    del message["Content-Type"]
    message["Content-Type"] = "text/plain"
    return message


def _parse(data: bytes) -> email.message.Message:
    return email.message_from_bytes(data, policy=email.policy.compat32)
