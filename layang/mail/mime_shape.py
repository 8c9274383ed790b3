"""Measuring a message's MIME shape before it is parsed (section 15's inbound limits): a scan
of its bytes that stops as soon as a limit is passed, so that its cost does not grow with what
an attacker packs into the message."""

from __future__ import annotations

import re

MAX_PARTS = 100
"""MIME parts a message may have to be parsed."""
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
