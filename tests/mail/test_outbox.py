"""The outbox's stored form: a large message's payload is written in chunks whose text, put
together, is exactly the JSON a small message's payload is stored as."""

from __future__ import annotations

import base64
import json
import os

import pytest

from layang.mail.message import Attachment, Header, Mailbox, OutgoingMessage
from layang.mail.outbox import PAYLOAD_CHUNK_CHARS, StoredPayload, json_pieces

TRICKY = 'plain, "quoted", back\\slash, tab\t, line\n, é, 日本, 😀 (astral), \x00, \u2028.'


@pytest.mark.parametrize(
    "value",
    [
        TRICKY * 5,
        {"v": 2, "text": TRICKY * 3, "list": [TRICKY, [], {}, [TRICKY * 4]], "": None},
        [True, False, None, 0, -1, 10**20, 1.5, "", {"a": [{"b": TRICKY * 2}]}],
        {},
        [],
    ],
)
@pytest.mark.parametrize("size", [1, 2, 7, 64])
def test_json_pieces_join_into_what_json_dumps_writes(value, size):
    pieces = list(json_pieces(value, size))
    assert "".join(pieces) == json.dumps(value, separators=(",", ":"))
    # A long string comes in escaped slices of ``size`` characters (at most 12 characters
    # each, an astral one's two \u escapes); the rest in pieces as small as the keys.
    assert all(len(piece) <= 12 * size + 24 for piece in pieces)


def message(content: str, html: str | None = None) -> OutgoingMessage:
    return OutgoingMessage(
        sender=Mailbox("shop@sender.test", "Shop"),
        subject="Large",
        to=(Mailbox("ana@rcpt.test"),),
        text="See the attachment.",
        html=html,
        attachments=(Attachment("data.bin", content, "application/octet-stream"),),
        headers=(Header("X-Order", "42"),),
        date_ms=1_763_000_000_000,
    )


def test_a_small_message_is_stored_whole_as_before():
    small = message(base64.b64encode(b"hello").decode())
    stored = StoredPayload(small)
    assert stored.inline == json.dumps(small.to_payload(), separators=(",", ":"))
    assert list(stored.chunk_rows("t1")) == []


def test_a_large_message_is_stored_in_chunks_that_read_back_as_the_message():
    content = base64.b64encode(os.urandom(3 * PAYLOAD_CHUNK_CHARS)).decode()
    large = message(content, html="<p>" + TRICKY * 20_000 + "</p>")
    stored = StoredPayload(large)
    assert stored.inline is None
    rows = list(stored.chunk_rows("t1"))
    assert [(tid, seq) for tid, seq, _ in rows] == [("t1", n) for n in range(len(rows))]
    assert len(rows) >= 5
    # Each chunk is about the chunk size: none is the attachment's whole text.
    assert all(len(text) < 2 * PAYLOAD_CHUNK_CHARS for _, _, text in rows[:-1])
    text = "".join(text for _, _, text in rows)
    assert text == json.dumps(large.to_payload(), separators=(",", ":"))
    assert OutgoingMessage.from_payload(json.loads(text)) == large
    # The rows are made afresh each time they are asked for (a group commit may retry).
    assert list(stored.chunk_rows("t1")) == rows
