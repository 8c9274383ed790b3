"""What MIME bombs cost `layang inbound`: six 2.3 MB messages of 50,000 MIME parts each, sent
at once to a `layang inbound` process, while a probe connects every 0.2 s.

Prints the time until all six were answered, the slowest greeting the probe got meanwhile,
and the CPU time the server (and its parsing children) used. ``--code DIR`` runs the server
from another checkout of Layang (e.g. an export of an older commit), for a before/after.

    python bench/inbound_limits.py [--code DIR] [--count 6] [--parts 50000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import smtplib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def bomb(parts: int) -> bytes:
    body = b"".join(
        b"--bomb\r\nContent-Type: text/plain\r\n\r\nsome text\r\n" for _ in range(parts)
    )
    return (
        b"From: someone@example.net\r\nSubject: many parts\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/mixed; boundary="bomb"\r\n\r\n' + body + b"--bomb--\r\n"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """CPU time of ``pid`` and its live children (the parsers), from /proc."""
    total = 0.0
    pids = [pid]
    with contextlib.suppress(OSError):
        pids += [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for each in pids:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def wait_listening(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as probe:
                probe.recv(100)
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("layang inbound did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to run the server from")
    parser.add_argument("--count", type=int, default=6)
    parser.add_argument("--parts", type=int, default=50_000)
    args = parser.parse_args()

    data = bomb(args.parts)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="layang-bench-") as directory:
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
        env.update(
            LAYANG_DATA_DIR=directory,
            LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
            LAYANG_INBOUND_BIND=f"127.0.0.1:{port}",
            LAYANG_LOG_LEVEL="WARNING",
            PYTHONPATH=str(args.code.resolve()),
        )
        server = subprocess.Popen(
            [sys.executable, "-m", "layang", "inbound"], cwd=args.code, env=env
        )
        try:
            wait_listening(port)
            before = cpu_seconds(server.pid)
            greetings: list[float] = []
            done = threading.Event()

            def probe() -> None:
                while not done.is_set():
                    started = time.monotonic()
                    try:
                        with socket.create_connection(("127.0.0.1", port), timeout=120) as conn:
                            conn.recv(100)
                    except OSError:
                        pass
                    greetings.append(time.monotonic() - started)
                    time.sleep(0.2)

            failures: list[str] = []

            def send() -> None:
                try:
                    with smtplib.SMTP("127.0.0.1", port, local_hostname="x", timeout=600) as smtp:
                        smtp.sendmail("", ["fbl@bounces.127.0.0.1"], data)
                except (OSError, smtplib.SMTPException) as error:
                    failures.append(type(error).__name__)

            probing = threading.Thread(target=probe)
            senders = [threading.Thread(target=send) for _ in range(args.count)]
            started = time.monotonic()
            probing.start()
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join()
            elapsed = time.monotonic() - started
            cpu = cpu_seconds(server.pid) - before
            done.set()
            probing.join()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(
        f"{args.count} messages of {len(data) / 1e6:.1f} MB, {args.parts} MIME parts each: "
        f"all answered in {elapsed:.1f} s ({len(failures)} failed: {failures}); slowest greeting "
        f"meanwhile {max(greetings):.2f} s; server CPU {cpu:.1f} s"
    )


if __name__ == "__main__":
    main()
