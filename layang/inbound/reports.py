"""Reading inbound mail into the reports of :mod:`layang.domain.feedback`, by the first
reader that knows the message, in this order:

- :mod:`~layang.inbound.dsn`: delivery status notifications, RFC 3464 and RFC 6533;
- :mod:`~layang.inbound.arf`: complaints, RFC 5965 feedback reports;
- :mod:`~layang.inbound.mta_bounces`: the non-standard notices of MTAs and providers;
- :mod:`~layang.inbound.auto_reply`: RFC 3834 automatic replies (after the bounces, which are
  automatic replies too).

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
import re

from layang.domain.feedback import Report, Unrecognised
from layang.inbound.arf import read_arf
from layang.inbound.auto_reply import read_auto_reply
from layang.inbound.dsn import read_dsn
from layang.inbound.mta_bounces import read_mta_bounce
from layang.inbound.report_parts import MAX_PARTS
from layang.inbound.ses_notifications import read_ses_notification

__all__ = ["MAX_DEPTH", "MAX_PARTS", "mime_shape_problem", "read_report"]
MAX_DEPTH = 10
"""Levels of nesting (multiparts and attached messages) a message may have to be parsed."""

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
        for reader in (read_dsn, read_arf, read_ses_notification, read_mta_bounce, read_auto_reply):
            report = reader(message)
            if report is not None:
                return report
    except Exception as error:  # malformed mail of any kind is only unrecognised
        return Unrecognised(f"could not be parsed: {type(error).__name__}")
    return Unrecognised("not a delivery status or feedback report")
