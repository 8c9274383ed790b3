"""The HTTP front of ``layang serve`` (layang.serving.http_front) against plain gunicorn
``gthread``.

Two servers on the same data, measured alternately in one run: ``new`` is ``layang serve``'s
settings (gunicorn.conf.py), ``old`` the same with gunicorn's own ``gthread`` worker and its
2 s keep-alive, as shipped before. Prints

- intake: POST /v1/layang/transmissions requests/s with keep-alive clients, and new/old;
- slow clients: /healthz latency (5 fresh connections, 10 s counts as no answer) while N
  connections each send a request head one line every second.

    python bench/http_front.py [--seconds 8] [--rounds 3] [--clients 4] [--workers 2]
        [--slow 200 --slow 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# Run as a script, bench/ is on the path.
from intake import ROOT, free_port, measure, start_gunicorn, wait_healthy

SERVERS = {
    "old": ["-c", "gunicorn.conf.py", "-k", "gthread", "--keep-alive", "2"],
    "new": ["-c", "gunicorn.conf.py"],
}


def healthz_under_slow_clients(port: int, count: int) -> tuple[list[float], int]:
    """/healthz latencies while ``count`` slow clients are connected, and how many of those
    the server had closed by the end."""
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        sock.sendall(b"POST /v1/layang/transmissions HTTP/1.1\r\nHost: x\r\n")
        sockets.append(sock)
    stop = threading.Event()
    closed = set()

    def trickle() -> None:
        while not stop.wait(1):
            for n, sock in enumerate(sockets):
                try:
                    sock.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    closed.add(n)

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    time.sleep(1.5)
    latencies = []
    try:
        for _ in range(5):
            started = time.monotonic()
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                    sock.settimeout(10)
                    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    ok = sock.recv(100).startswith(b"HTTP/1.1 200")
                latencies.append(time.monotonic() - started if ok else 10.0)
            except OSError:
                latencies.append(10.0)
    finally:
        stop.set()
        thread.join()
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.close()
    return latencies, len(closed)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slow", type=int, action="append", help="slow clients (repeatable)")
    args = parser.parse_args()
    slow_counts = args.slow or [200, 1000]

    tmp = Path(tempfile.mkdtemp(prefix="layang-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp),
        LAYANG_LOG_LEVEL="WARNING",
        LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
        LAYANG_HTTP_WORKERS=str(args.workers),
        PYTHONPATH=str(ROOT),
    )

    def cli(*words: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "layang", *words],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return json.loads(out)

    cli("accounts", "create", "bench", "--live")
    key = cli("keys", "create", "bench")["key"]
    ports = {label: free_port() for label in SERVERS}
    processes = []
    rates: dict[str, list[float]] = {label: [] for label in SERVERS}
    try:
        for label, options in SERVERS.items():
            server_env = {**env, "LAYANG_HTTP_BIND": f"127.0.0.1:{ports[label]}"}
            processes.append(
                start_gunicorn("wsgi:app", ports[label], server_env, tmp / f"{label}.log", options)
            )
        for label in SERVERS:
            wait_healthy(ports[label], "/healthz")
            measure(ports[label], key, 1, args.clients)
        for _ in range(args.rounds):
            for label in SERVERS:
                rates[label].append(measure(ports[label], key, args.seconds, args.clients))
        print(f"intake, {args.workers} processes, {args.clients} keep-alive clients:")
        for label in SERVERS:
            print(f"  {label}: {statistics.median(rates[label]):8.1f} requests/s  {rates[label]}")
        ratio = statistics.median(rates["new"]) / statistics.median(rates["old"])
        print(f"  new/old: {ratio:.2f}")
        print("/healthz latency under slow clients (s):")
        for count in slow_counts:
            for label in SERVERS:
                latencies, closed = healthz_under_slow_clients(ports[label], count)
                print(
                    f"  {label}, {count} slow: max {max(latencies):.3f}"
                    f" median {statistics.median(latencies):.3f}, closed by server {closed}"
                )
                wait_healthy(ports[label], "/healthz")
    finally:
        for process in processes:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
