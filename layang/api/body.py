"""Reading a request body with as few copies of it as its size calls for.

A large body (over ``LARGE_BODY_BYTES``) is read once into one buffer, kept on the request
while the idempotency key's fingerprint is taken, and let go as soon as the JSON parser has it
as text: the request holds its body about twice at most (its bytes, then its text; its text,
then what is parsed from it), and only once while it is stored.
"""

from __future__ import annotations

import json
from typing import Any

import flask

LARGE_BODY_BYTES = 1024 * 1024
READ_STEP = 256 * 1024
"""Each read of a large body costs a few copies of what it asks for in the server's and
werkzeug's buffers, on top of the body read so far: kept small beside the body."""


def body_bytes(req: flask.Request) -> bytes | bytearray:
    """The body's bytes, read on first use and kept on the request (until ``json_source``).

    werkzeug reads a whole body as a list of pieces joined at the end: twice the body at once.
    A large body with a ``Content-Length`` is read into one buffer instead. Raises werkzeug's
    ``RequestEntityTooLarge`` over the request's ``max_content_length``.
    """
    cached = getattr(req, "_cached_data", None)
    if cached is not None:
        return cached
    length = req.content_length or 0
    if length > LARGE_BODY_BYTES:
        req._cached_data = _read_body(req.stream, length)
        return req._cached_data
    data = req.get_data(cache=True)
    limit = req.max_content_length
    if limit is not None and len(data) >= limit:
        # A body sent in chunks stops at the limit without an error: reading on raises the
        # 413 that a declared Content-Length gets at once.
        req.stream.read(1)
    return data


def json_source(req: flask.Request) -> bytes | str:
    """The body for the JSON parser. A large one is handed over as text and no longer kept
    on the request, so that its bytes are gone before it is parsed. Raises
    ``json.JSONDecodeError`` for a body that is not UTF-8."""
    data = body_bytes(req)
    if len(data) <= LARGE_BODY_BYTES:
        return data
    req._cached_data = b""
    return _decoded(data)


def _read_body(stream: Any, length: int) -> bytearray:
    """The ``length`` bytes of a request body, read into one buffer ``READ_STEP`` at a time."""
    buffer = bytearray(length)
    with memoryview(buffer) as view:
        received = 0
        while received < length:
            count = stream.readinto(view[received : received + READ_STEP])
            if not count:
                break
            received += count
    del buffer[received:]
    return buffer


def _decoded(data: bytes | bytearray) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        # What webargs raises for it too: answered 400 malformed_json.
        raise json.JSONDecodeError(f"Bytes decoding error: {error.reason}", "", 0) from None
