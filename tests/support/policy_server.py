"""An HTTPS server on a loopback address, port 443, serving MTA-STS policy files the way
``https://mta-sts.<domain>/.well-known/mta-sts.txt`` does (tests run as root), and keeping what
is POSTed to it (TLS-RPT reports). Each server
takes an address of its own in 127.0.0.0/8, so tests running at once do not collide."""

from __future__ import annotations

import random
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POLICY_PATH = "/.well-known/mta-sts.txt"


class PolicyServer:
    """Serves ``body`` with ``status`` and ``content_type`` at the policy path (``headers``
    added); ``requests`` counts the GETs seen."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.body = b""
        self.status = 200
        self.content_type = "text/plain"
        self.headers: dict[str, str] = {}
        self.requests = 0
        self.hosts: list[str] = []
        self.posted: list[tuple[str, str, bytes]] = []  # (path, content type, body)
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests += 1
                owner.hosts.append(self.headers.get("Host", ""))
                body = owner.body if self.path == POLICY_PATH else b"not found"
                status = owner.status if self.path == POLICY_PATH else 404
                self.send_response(status)
                self.send_header("Content-Type", owner.content_type)
                self.send_header("Content-Length", str(len(body)))
                for name, value in owner.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                owner.posted.append(
                    (self.path, self.headers.get("Content-Type", ""), self.rfile.read(length))
                )
                self.send_response(owner.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        for _ in range(20):
            address = (
                f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.{random.randint(2, 254)}"
            )
            try:
                self.server = ThreadingHTTPServer((address, 443), Handler)
                break
            except OSError:
                continue
        else:
            raise AssertionError("no free loopback address for the policy server")
        self.address = address
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def serve(self, policy: str, **changes: Any) -> None:
        self.body = policy.encode()
        for name, value in changes.items():
            setattr(self, name, value)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
