"""A local HTTP endpoint that Layang posts to in a benchmark (a webhook receiver, an inbound
route's endpoint): it answers every POST 204 and counts what was posted, and answers GET with
the count so far. It runs in a process of its own, so that counting takes no CPU from the
process measuring."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve_counter(port: int, count_of: Callable[[bytes], int]) -> None:
    """Serve on 127.0.0.1:``port`` until killed, adding ``count_of(body)`` for each POST;
    prints ``ready`` once listening."""
    count = [0]
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            with lock:
                count[0] += count_of(body)
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            reply = str(count[0]).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


def start_counter(script: str, option: str, port: int) -> subprocess.Popen:
    """Run ``script option port`` (a benchmark whose ``option`` calls :func:`serve_counter`)
    and return the process once it listens."""
    counter = subprocess.Popen(
        [sys.executable, script, option, str(port)], stdout=subprocess.PIPE, text=True
    )
    assert counter.stdout is not None and counter.stdout.readline().strip() == "ready"
    return counter


def counted(port: int) -> int:
    """What the counter on ``port`` has counted so far."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as answer:
        return int(answer.read())
