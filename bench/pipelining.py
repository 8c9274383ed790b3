"""The SMTP session's rate with PIPELINING on and off, against a raw smtplib loop, to the same
local sink.

Each mode sends the same N pre-built 3-recipient text+HTML messages over one reused session
to an aiosmtpd sink (its own process) that advertises PIPELINING. Rounds alternate the modes, and
their order, so drift on the machine affects them alike; each rate is over all its rounds.
``--latency-ms`` makes the sink hold each reply that long, like a link to a nearby smart host
(loopback has almost no round-trip time, so the sink's own work dominates there).

    python bench/pipelining.py [--messages 3000] [--rounds 3] [--latency-ms 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import smtplib
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from layang.delivery.envelope import Envelope  # noqa: E402
from layang.delivery.smtp import SmtpSession  # noqa: E402
from layang.mail.compose import compose_message  # noqa: E402
from layang.mail.message import Mailbox, OutgoingMessage  # noqa: E402

TEXT = "Hello Ana,\n\nyour order has shipped.\n" * 10
HTML = "<html><body><p>Hello Ana,</p><p>your order has shipped.</p></body></html>" * 5
SENDER = "shop@sender.example"

Message = tuple[list[str], bytes]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sink(port: int, latency_ms: float) -> subprocess.Popen:
    sink = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "smtp_sink.py"),
            str(port),
            "--pipelining",
            f"--latency-ms={latency_ms}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"
    return sink


def build(count: int) -> list[Message]:
    messages = []
    for n in range(count):
        to = [f"r{n}.{k}@rcpt.example" for k in range(3)]
        outgoing = OutgoingMessage(
            sender=Mailbox(SENDER),
            subject=f"order {n}",
            to=tuple(Mailbox(address) for address in to),
            text=TEXT,
            html=HTML,
            date_ms=1_700_000_000_000,
        )
        messages.append((to, compose_message(outgoing, f"<m{n}@sender.example>")))
    return messages


def session_sender(port: int, pipelining: bool) -> Callable[[list[Message]], float]:
    """Layang's client: one session, one transaction after another, on an event loop of its own
    (as the engine runs it, less the engine)."""
    loop = asyncio.new_event_loop()
    session = SmtpSession(
        "127.0.0.1", port, tls="off", helo_name="bench.local", pipelining=pipelining
    )
    loop.run_until_complete(session.open())

    async def send_all(messages: list[Message]) -> None:
        for to, message in messages:
            results = await session.send(Envelope(SENDER, tuple(to), message, crlf_clean=True))
            assert all(r.code == 250 for r in results), results

    def run(messages: list[Message]) -> float:
        started = time.perf_counter()
        loop.run_until_complete(send_all(messages))
        return time.perf_counter() - started

    return run


def raw_sender(port: int) -> Callable[[list[Message]], float]:
    smtp = smtplib.SMTP("127.0.0.1", port, local_hostname="bench.local")

    def run(messages: list[Message]) -> float:
        started = time.perf_counter()
        for to, message in messages:
            smtp.sendmail(SENDER, to, message)
        return time.perf_counter() - started

    return run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0.0)
    args = parser.parse_args()

    messages = build(args.messages)
    port = free_port()
    sink = start_sink(port, args.latency_ms)
    try:
        modes = {
            "pipelining on": session_sender(port, pipelining=True),
            "pipelining off": session_sender(port, pipelining=False),
            "raw smtplib": raw_sender(port),
        }
        for run in modes.values():  # connect and warm up outside the measurement
            run(messages[:50])
        elapsed = dict.fromkeys(modes, 0.0)
        for round_number in range(args.rounds):
            order = list(modes)
            if round_number % 2:
                order.reverse()
            for name in order:
                elapsed[name] += modes[name](messages)
    finally:
        sink.terminate()
        sink.wait()

    rate = {name: args.rounds * len(messages) / seconds for name, seconds in elapsed.items()}
    size = sum(len(m) for _, m in messages) // len(messages)
    print(
        f"{args.messages} messages x {args.rounds} rounds, 3 recipients each, ~{size} bytes, "
        "to a local aiosmtpd sink advertising PIPELINING, one reused session per mode, "
        f"replies held {args.latency_ms:g} ms"
    )
    for name, value in rate.items():
        print(f"{name + ':':16}{value:8.1f} msg/s")
    print(f"pipelining on/off:  {rate['pipelining on'] / rate['pipelining off']:.2f}")
    print(f"pipelining on/raw:  {rate['pipelining on'] / rate['raw smtplib']:.2f}")


if __name__ == "__main__":
    main()
