"""Slow clients cannot take the HTTP API down: ``layang serve`` as shipped, a real subprocess,
with hundreds of connections that send their request a line or a byte at a time."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import threading
import time

import httpx
import pytest

from tests.delivery.test_crash import _healthy, free_port, process_env, start, stop, wait_until

SLOW_CLIENTS = 200
SEND = {
    "from": {"email": "shop@sender.test"},
    "subject": "during the siege",
    "to": [{"email": "ana@rcpt.test"}],
    "bodyText": "hi",
}


def serve(config, tmp_path):
    port = free_port()
    log = tmp_path / "serve.log"
    process = start(["serve"], process_env(config, LAYANG_HTTP_BIND=f"127.0.0.1:{port}"), log)
    wait_until(lambda: _healthy(port), 30, "the API did not come up")
    return process, port


@pytest.fixture
def server(config, api_key, tmp_path):
    process, port = serve(config, tmp_path)
    try:
        yield port
    finally:
        stop(process)


class SlowClients:
    """``count`` connections that each send ``first`` at once, then one piece of ``trickle`` at
    a time, every ``interval`` seconds, from one thread."""

    def __init__(self, port: int, count: int, first: bytes, trickle: bytes, interval: float):
        self.port, self.count, self.first = port, count, first
        self.trickle, self.interval = trickle, interval
        self.sockets: list[socket.socket] = []
        self.closed_by_server = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SlowClients:
        for _ in range(self.count):
            sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            sock.sendall(self.first)
            self.sockets.append(sock)
        self._thread.start()
        return self

    def _run(self) -> None:
        for piece in self.trickle:
            if self._stop.wait(self.interval):
                return
            for sock in self.sockets:
                try:
                    sock.sendall(bytes([piece]))
                except OSError:
                    self.closed_by_server += 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


def healthz_latencies(port: int, samples: int = 5) -> list[float]:
    """Seconds each of ``samples`` fresh /healthz requests took (10 s when none came)."""
    took = []
    for _ in range(samples):
        started = time.monotonic()
        try:
            response = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10)
            assert response.status_code == 200
            took.append(time.monotonic() - started)
        except httpx.TimeoutException:
            took.append(10.0)
    return took


def assert_still_served(port: int, api_key: str) -> None:
    latencies = healthz_latencies(port)
    assert max(latencies) < 1, latencies
    started = time.monotonic()
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/layang/transmissions",
        headers={"Authorization": f"Bearer {api_key}"},
        json=SEND,
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert time.monotonic() - started < 2


def test_slow_request_heads_do_not_starve_healthz_or_sends(server, api_key):
    head = b"POST /v1/layang/transmissions HTTP/1.1\r\nHost: x\r\n"
    with SlowClients(server, SLOW_CLIENTS, head, b"X-Slow: 1\r\n" * 4, 0.5) as slow:
        time.sleep(1)  # every slow connection has been accepted and sent a second line
        assert_still_served(server, api_key)
        assert slow.closed_by_server == 0  # held, not refused


def test_slow_request_bodies_do_not_starve_healthz_or_sends(server, api_key):
    head = (
        b"POST /v1/layang/transmissions HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
    )
    with SlowClients(server, SLOW_CLIENTS, head, b" " * 4, 0.5) as slow:
        time.sleep(1)
        assert_still_served(server, api_key)
        assert slow.closed_by_server == 0


def read_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (or 15 s pass)."""
    sock.settimeout(15)
    data = b""
    with contextlib.suppress(TimeoutError):
        while chunk := sock.recv(65536):
            data += chunk
    return data


def test_a_request_head_that_takes_too_long_is_answered_408_and_closed(server):
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b'"error": "request_timeout"' in answer
    assert 9 < time.monotonic() - started < 13


def test_a_body_trickling_below_the_minimum_rate_is_answered_408(server):
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(
            b"POST /v1/layang/transmissions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n"
        )
        started = time.monotonic()
        sock.sendall(b"{")
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert 9 < time.monotonic() - started < 13


def test_a_request_sent_in_pieces_and_chunks_is_answered_in_full(server, api_key):
    body = json.dumps(SEND).encode()
    head = (
        f"POST /v1/layang/transmissions HTTP/1.1\r\nHost: x\r\n"
        f"Authorization: Bearer {api_key}\r\nContent-Type: application/json\r\n"
    ).encode()
    chunked = (
        b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (body[:10], body[10:]))
        + b"0\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", server)) as sock:
        for piece in (head, b"Transfer-Encoding: chunked\r\n\r\n", chunked[:7], chunked[7:]):
            sock.sendall(piece)
            time.sleep(0.2)
        # the same connection, kept alive, takes the next request
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert answer.count(b"HTTP/1.1 200 ") == 2
    assert b"transmissionId" in answer and b'{"status":"ok"}' in answer.replace(b" ", b"")


def test_expect_100_continue_gets_one_interim_answer_before_the_body(server, api_key):
    body = json.dumps(SEND).encode()
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(
            f"POST /v1/layang/transmissions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            f"Authorization: Bearer {api_key}\r\nContent-Type: application/json\r\n"
            f"Expect: 100-continue\r\nContent-Length: {len(body)}\r\n\r\n".encode()
        )
        sock.settimeout(5)
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 "), answer
    assert b"100 Continue" not in answer


def test_slow_clients_do_not_hold_up_a_graceful_stop(config, api_key, tmp_path):
    process, port = serve(config, tmp_path)
    try:
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"
        with SlowClients(port, 50, head, b"", 1), httpx.Client() as kept_alive:
            assert kept_alive.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
            started = time.monotonic()
            process.send_signal(signal.SIGTERM)
            assert process.wait(15) == 0
            assert time.monotonic() - started < 6
    finally:
        stop(process)


def test_a_malformed_request_is_still_answered_by_gunicorns_parser(server):
    with socket.create_connection(("127.0.0.1", server)) as sock:
        sock.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 5x\r\n\r\n")
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 400 "), answer
