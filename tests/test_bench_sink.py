"""The latency sink (bench/support/latency_sink.py), the upstream of bench/vs_postfix.py: each
reply leaves the set latency after its own command arrived, so pipelined commands wait one
latency together, not one each; the end of DATA waits the extra delay too; and the sink reports
when the recipients it was told to expect are in."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from bench.support.latency_sink import Sink
from bench.support.machine import free_port

LATENCY = 0.3


@pytest.fixture
def sink() -> Iterator[Sink]:
    sink = Sink(free_port())
    yield sink
    sink.stop()


def read_replies(conn: socket.socket, count: int) -> tuple[list[str], float]:
    """``count`` reply lines (multi-line replies count once) and when the last one came."""
    data = b""
    while True:
        lines = [line for line in data.split(b"\r\n")[:-1] if line[3:4] != b"-"]
        if len(lines) >= count:
            return [line.decode() for line in lines], time.monotonic()
        chunk = conn.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk


def session(sink: Sink) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", sink.port), timeout=10)
    read_replies(conn, 1)
    conn.sendall(b"EHLO client.example\r\n")
    replies, _ = read_replies(conn, 1)
    assert replies[0].startswith("250 ")
    return conn


def test_pipelined_commands_wait_one_latency_together(sink: Sink) -> None:
    sink.set(LATENCY * 1000, 0)
    with session(sink) as conn:
        pipelined(conn)


def pipelined(conn: socket.socket) -> None:
    sent = time.monotonic()
    conn.sendall(
        b"MAIL FROM:<a@sender.example>\r\nRCPT TO:<b@rcpt.example>\r\n"
        b"RCPT TO:<c@rcpt.example>\r\nDATA\r\n"
    )
    replies, last = read_replies(conn, 4)
    assert [r[:3] for r in replies] == ["250", "250", "250", "354"]
    # One latency for the four of them (four would be 1.2 s).
    assert LATENCY <= last - sent < 2 * LATENCY


def test_end_of_data_waits_the_extra_delay_and_deliveries_are_counted(sink: Sink) -> None:
    sink.set(0, LATENCY * 1000)
    sink.expect(3)
    with session(sink) as conn:
        deliver(sink, conn)


def deliver(sink: Sink, conn: socket.socket) -> None:
    conn.sendall(b"MAIL FROM:<a@sender.example>\r\nRCPT TO:<b@rcpt.example>\r\n")
    conn.sendall(b"RCPT TO:<c@rcpt.example>\r\nDATA\r\n")
    read_replies(conn, 4)
    sent = time.monotonic()
    conn.sendall(b"Subject: one\r\n\r\nhello\r\n.\r\n")
    replies, last = read_replies(conn, 1)
    assert replies[0].startswith("250 ")
    assert LATENCY <= last - sent < 2 * LATENCY
    assert sink.count() == 2
    # A message whose body starts with the terminator line (an empty body) completes too.
    conn.sendall(b"MAIL FROM:<a@sender.example>\r\nRCPT TO:<d@rcpt.example>\r\nDATA\r\n")
    assert [r[:3] for r in read_replies(conn, 3)[0]] == ["250", "250", "354"]
    conn.sendall(b".\r\nQUIT\r\n")
    replies, _ = read_replies(conn, 2)
    assert [r[:3] for r in replies] == ["250", "221"]
    drained = sink.wait(10)
    assert drained.count == 3
    assert drained.first <= drained.last


def ehlo_keywords(conn: socket.socket) -> list[str]:
    conn.sendall(b"EHLO client.example\r\n")
    data = b""
    while not any(line[3:4] == b" " for line in data.split(b"\r\n")[:-1]):
        chunk = conn.recv(65536)
        assert chunk, f"closed after {data!r}"
        data += chunk
    return [line[4:].decode().split()[0] for line in data.split(b"\r\n")[1:-1]]


def test_bdat_chunks_are_read_by_size_and_pipelined_commands_follow(sink: Sink) -> None:
    sink.set(0, 0)
    sink.expect(3)
    conn = socket.create_connection(("127.0.0.1", sink.port), timeout=10)
    with conn:
        read_replies(conn, 1)
        assert "CHUNKING" in ehlo_keywords(conn)
        # A message in two chunks whose bytes look like commands and a DATA terminator: the
        # sink must take them as octets, not lines.
        first = b"Subject: two\r\n\r\nQUIT\r\n.\r\n"
        second = b"RSET\r\nend\r\n"
        # The next transaction pipelined right behind the LAST chunk, in the same write, its
        # one chunk split across writes in the middle.
        third = b"Subject: three\r\n\r\nhi\r\n"
        conn.sendall(
            b"MAIL FROM:<a@sender.example>\r\nRCPT TO:<b@rcpt.example>\r\n"
            b"RCPT TO:<c@rcpt.example>\r\n"
            + b"BDAT %d\r\n" % len(first)
            + first
            + b"BDAT %d LAST\r\n" % len(second)
            + second
            + b"MAIL FROM:<a@sender.example>\r\nRCPT TO:<d@rcpt.example>\r\n"
            + b"BDAT %d LAST\r\n" % len(third)
            + third[:5]
        )
        time.sleep(0.2)
        conn.sendall(third[5:] + b"NOOP\r\n")
        replies, _ = read_replies(conn, 9)
        assert [r[:3] for r in replies] == ["250"] * 9
        assert "chunk" in replies[3] and "queued" in replies[4] and "queued" in replies[7]
        drained = sink.wait(10)
        assert drained.count == 3
        # A chunk with no recipient is still read whole, then refused; the session goes on.
        conn.sendall(b"MAIL FROM:<a@sender.example>\r\nBDAT 6 LAST\r\nQUIT\r\nNOOP\r\n")
        replies, _ = read_replies(conn, 3)
        assert [r[:3] for r in replies] == ["250", "503", "250"]
        # BDAT 0 LAST ends a message whose last chunk was sent without LAST.
        conn.sendall(
            b"MAIL FROM:<a@sender.example>\r\nRCPT TO:<e@rcpt.example>\r\n"
            b"BDAT 3\r\nabcBDAT 0 LAST\r\nQUIT\r\n"
        )
        replies, _ = read_replies(conn, 5)
        assert [r[:3] for r in replies] == ["250", "250", "250", "250", "221"]
    assert sink.count() == 4


def test_without_chunking_bdat_is_not_offered_nor_understood() -> None:
    sink = Sink(free_port(), chunking=False)
    try:
        conn = socket.create_connection(("127.0.0.1", sink.port), timeout=10)
        with conn:
            read_replies(conn, 1)
            keywords = ehlo_keywords(conn)
            assert "CHUNKING" not in keywords and "PIPELINING" in keywords
            conn.sendall(b"MAIL FROM:<a@sender.example>\r\nRCPT TO:<b@rcpt.example>\r\n")
            conn.sendall(b"BDAT 4 LAST\r\n")
            replies, _ = read_replies(conn, 3)
            assert replies[2].startswith("502 ")
            # PIPELINING with DATA still delivers.
            sink.expect(1)
            conn.sendall(b"DATA\r\n")
            read_replies(conn, 1)
            conn.sendall(b"Subject: x\r\n\r\nbody\r\n.\r\n")
            assert sink.wait(10).count == 1
    finally:
        sink.stop()
