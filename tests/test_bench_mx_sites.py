"""The simulated sites of bench/mx.py: one server per loopback address on one port, each
counting the sessions open on it at once and its deliveries; the throttle armed before a
drain starts once that many deliveries are in (even though the drain says ``expect`` again),
and then the site answers MAIL with 421 and closes."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from bench.mx import Sites, shared_port
from tests.test_bench_sink import read_replies

HOSTS = ["127.0.0.2", "127.0.0.3"]


@pytest.fixture
def sites() -> Iterator[Sites]:
    sites = Sites(shared_port(HOSTS), HOSTS)
    sites.set(0, 0)
    yield sites
    sites.stop()


def open_session(sites: Sites, host: str) -> socket.socket:
    conn = socket.create_connection((host, sites.port), timeout=10)
    read_replies(conn, 1)
    conn.sendall(b"EHLO client.example\r\n")
    read_replies(conn, 1)
    return conn


def send(conn: socket.socket, rcpt: str, refused: bool = False) -> list[str]:
    """The replies to one pipelined transaction (only the first when it is ``refused``)."""
    conn.sendall(f"MAIL FROM:<a@sender.example>\r\nRCPT TO:<{rcpt}>\r\nDATA\r\n".encode())
    if refused:
        return read_replies(conn, 1)[0]
    read_replies(conn, 3)
    conn.sendall(b"Subject: one\r\n\r\nhello\r\n.\r\n")
    return read_replies(conn, 1)[0]


def test_sessions_and_deliveries_are_counted_per_site_and_the_throttle_starts_midway(
    sites: Sites,
) -> None:
    sites.expect(4)
    sites.throttle(0, 2, 30)
    sites.expect(4)  # as the worker's drain does: the throttle stays armed
    first, second, other = (open_session(sites, h) for h in (HOSTS[0], HOSTS[0], HOSTS[1]))
    with first, second, other:
        assert send(first, "a@d000.example")[-1].startswith("250 ")
        assert send(other, "b@d001.example")[-1].startswith("250 ")
        # Two deliveries in: the first site now says "slow down" and closes; the other does not.
        assert send(second, "c@d000.example", refused=True)[0].startswith("421 4.7.28")
        assert second.recv(100) == b""
        assert send(other, "d@d001.example")[-1].startswith("250 ")
    stats = sites.stats()
    throttled, fine = stats["sites"]
    assert (throttled["peak"], throttled["delivered"], throttled["refused"]) == (2, 1, 1)
    assert (fine["peak"], fine["delivered"], fine["refused"]) == (1, 2, 0)
    assert stats["throttled_at"] is not None
    assert sum(fine["buckets"].values()) == 2
