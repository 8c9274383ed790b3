"""A real HTTP server in the test process that receives webhooks, scripted to fail on demand."""

from __future__ import annotations

import json
import select
import socketserver
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass(frozen=True)
class Request:
    """One POST as received: its headers (lower-cased names), raw body and what it answered."""

    headers: dict[str, str]
    body: bytes
    answered: int | None

    @property
    def payload(self) -> dict[str, Any]:
        return json.loads(self.body)

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.payload["events"]


class Receiver:
    """Answers 204 unless scripted: ``script(500, 500, "hang")`` makes the next requests get a
    500, a 500, then no answer for ``hang_seconds``. ``stop()`` closes the port (connections
    are refused) and ``start()`` opens the same port again."""

    def __init__(
        self, hang_seconds: float = 3.0, tls: ssl.SSLContext | None = None, host: str = ""
    ) -> None:
        self.tls = tls
        self.host = host or "127.0.0.1"
        self.requests: list[Request] = []
        self.script_queue: deque[int | str] = deque()
        self.hang_seconds = hang_seconds
        self.lock = threading.Condition()
        self.port = 0
        self.server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}/hooks"

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                with receiver.lock:
                    step = receiver.script_queue.popleft() if receiver.script_queue else 204
                headers = {k.lower(): v for k, v in self.headers.items()}
                if step == "hang":
                    receiver._note(Request(headers, body, None))
                    time.sleep(receiver.hang_seconds)
                    return
                receiver._note(Request(headers, body, int(step)))
                reply = b"receiver says no" if int(step) >= 300 else b""
                self.send_response(int(step))
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        if self.tls is not None:
            server.socket = self.tls.wrap_socket(server.socket, server_side=True)
        self.port = server.server_address[1]
        self.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def script(self, *steps: int | str) -> None:
        with self.lock:
            self.script_queue.extend(steps)

    def _note(self, request: Request) -> None:
        with self.lock:
            self.requests.append(request)
            self.lock.notify_all()

    def delivered(self) -> list[Request]:
        """The requests answered with a 2xx."""
        with self.lock:
            return [r for r in self.requests if r.answered is not None and r.answered < 300]

    def events(self) -> list[dict[str, Any]]:
        """Every event of every request answered with a 2xx, in arrival order."""
        return [event for request in self.delivered() for event in request.events]

    def wait_for_requests(self, count: int, timeout: float = 15) -> list[Request]:
        deadline = time.monotonic() + timeout
        with self.lock:
            while len(self.requests) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.requests)} webhook requests, not {count}")
                self.lock.wait(left)
            return list(self.requests)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.stop()


class SlowLoris:
    """An HTTP server that reads each request, then answers one byte every ``interval``
    seconds, never finishing: the slowest an endpoint can be without timing out a read. Counts
    the requests open at once per path."""

    ANSWER = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"

    def __init__(self, interval: float = 5.0) -> None:
        self.interval = interval
        self.lock = threading.Lock()
        self.open: dict[str, int] = {}
        self.most_open: dict[str, int] = {}
        self.received = 0
        self.closing = threading.Event()
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}"

    def _handler(self) -> type[socketserver.BaseRequestHandler]:
        loris = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                request_line = self.rfile.readline().decode("latin-1")
                length = 0
                while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                self.rfile.read(length)
                path = request_line.split(" ")[1] if " " in request_line else "?"
                with loris.lock:
                    loris.received += 1
                    loris.open[path] = loris.open.get(path, 0) + 1
                    loris.most_open[path] = max(loris.most_open.get(path, 0), loris.open[path])
                # poll, not select: a long test run's process holds descriptors past 1024,
                # which select refuses (the handler then dropped the connection unanswered).
                poller = select.poll()
                poller.register(self.connection, select.POLLIN)
                try:
                    for byte in loris.ANSWER[:-1]:
                        # Wait one interval, or until the client hangs up.
                        readable = poller.poll(loris.interval * 1000)
                        if loris.closing.is_set() or (readable and not self.connection.recv(1)):
                            return
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                except OSError:
                    pass  # the client gave up: that is the point
                finally:
                    with loris.lock:
                        loris.open[path] -= 1

        return Handler

    def stop(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
