"""Fixtures for the SDK tests: a client on the live service, and a scripted HTTP stub for the
answers the real service does not give on demand (429, 5xx, dropped connections)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from layang.client import Layang
from layang.domain import accounts
from layang.models import Account
from tests.support.upstream import Upstream

SANDBOX_SENDER = "sandbox@sandbox.layang.test"


@pytest.fixture
def sdk(live_server: str, api_key: str) -> Iterator[Layang]:
    """The SDK on a live account of the real service, served on a real port."""
    with Layang(api_key, base_url=live_server, retry_backoff=0.01) as client:
        yield client


@pytest.fixture
def sandbox_account(app: Any) -> Account:
    return accounts.create_account("trial")


@pytest.fixture
def sandbox_sdk(live_server: str, sandbox_account: Account) -> Iterator[Layang]:
    """The SDK on a sandbox account of the same service."""
    key = accounts.create_api_key(sandbox_account, "sdk")[1]
    with Layang(key, base_url=live_server, retry_backoff=0.01) as client:
        yield client


def delivered_to(upstream: Upstream, address: str) -> Any:
    """The last message the upstream accepted for ``address``, parsed."""
    for received in reversed(upstream.received):
        if address in received.rcpt_tos:
            return received.message
    raise AssertionError(
        f"nothing delivered to {address}: {[r.rcpt_tos for r in upstream.received]}"
    )


@dataclass
class Reply:
    """What the stub answers: a status, headers and a JSON body; ``drop`` closes the
    connection without answering, ``delay`` waits before answering."""

    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    raw: bytes | None = None
    drop: bool = False
    delay: float = 0.0


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


class StubServer:
    """An HTTP server on 127.0.0.1 answering from a script, then 500 when it runs out."""

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.requests: list[Seen] = []
        self._lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with stub._lock:
                    stub.requests.append(
                        Seen(
                            self.command,
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            body,
                            time.monotonic(),
                        )
                    )
                    reply = stub.script.pop(0) if stub.script else Reply(500, {"error": "x"})
                if reply.delay:
                    time.sleep(reply.delay)
                if reply.drop:
                    self.close_connection = True
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    content_type = "text/html" if reply.raw is not None else "application/json"
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(payload)))
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up waiting, as it was told to

            do_GET = do_POST = do_PUT = do_DELETE = _handle

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def answer(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(10)
        self.server.server_close()


@pytest.fixture
def stub() -> Iterator[StubServer]:
    server = StubServer()
    yield server
    server.close()
