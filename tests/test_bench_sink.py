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
