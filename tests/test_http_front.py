"""Where the HTTP front finds the end of a request (layang.serving.http_front.RequestFrame)."""

from __future__ import annotations

import pytest

from layang.serving.http_front import MAX_HEAD_BYTES, Framing, RequestFrame

HEAD = b"POST /v1/layang/transmissions HTTP/1.1\r\nHost: x\r\n"


def frame_of(*pieces: bytes, max_body: int = 100) -> list[Framing]:
    """The framing after each piece arrives."""
    frame, buf, seen = RequestFrame(max_body), bytearray(), []
    for piece in pieces:
        buf += piece
        seen.append(frame.check(buf))
    return seen


def test_a_head_without_a_body_is_complete_at_its_blank_line():
    assert frame_of(b"GET / HTTP/1.1\r\nHost: x\r", b"\n\r", b"\n") == [
        Framing.MORE,
        Framing.MORE,
        Framing.COMPLETE,
    ]


def test_a_body_of_declared_length_is_complete_with_its_last_byte():
    pieces = (HEAD + b"content-LENGTH: 5\r\n\r\n", b"abcd", b"e")
    assert frame_of(*pieces) == [Framing.MORE, Framing.MORE, Framing.COMPLETE]


def test_a_chunked_body_is_complete_after_its_last_chunk_and_trailers():
    head = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    assert frame_of(head, b"3\r\nabc\r\n", b"0\r\n", b"\r\n")[-1] is Framing.COMPLETE
    with_trailer = frame_of(head, b"3;x=1\r\nabc\r\n0\r\nX-T: 1\r\n", b"\r\n")
    assert with_trailer == [Framing.MORE, Framing.MORE, Framing.COMPLETE]


@pytest.mark.parametrize(
    "request_bytes",
    [
        HEAD + b"Content-Length: 101\r\n\r\n",  # larger than accepted: the app answers 413
        HEAD + b"Content-Length: 5x\r\n\r\n",
        HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n",
        HEAD + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
        HEAD + b"Transfer-Encoding: gzip\r\n\r\n",
        HEAD + b"No colon here\r\n\r\n",
        HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",
        HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + (b"20\r\n" + b"a" * 32 + b"\r\n") * 2,
        HEAD + b"X: " + b"a" * MAX_HEAD_BYTES,
    ],
)
def test_what_it_cannot_frame_goes_to_gunicorns_parser_as_it_is(request_bytes):
    assert frame_of(request_bytes, max_body=100 if b"101" in request_bytes else 40)[-1] is (
        Framing.HAND_OVER
    )


def test_expect_100_continue_is_noticed_on_http_1_1_only():
    frame = RequestFrame(100)
    frame.check(HEAD + b"Expect: 100-Continue\r\nContent-Length: 3\r\n\r\n")
    assert frame.expect_continue
    old = RequestFrame(100)
    old.check(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n")
    assert not old.expect_continue
