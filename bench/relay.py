"""Relay rate: one `layang worker` process against a raw smtplib loop, to the same local sink.

Both send N text+HTML messages over one reused connection to an aiosmtpd sink running in its
own process. The raw loop sends pre-built bytes; the worker claims, builds, sends and records.

    python bench/relay.py [--messages 2000] [--database-url URL]
"""

from __future__ import annotations

import argparse
import os
import smtplib
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from layang.config import Config  # noqa: E402
from layang.db import open_database  # noqa: E402
from layang.migrations import upgrade  # noqa: E402
from layang.models import Recipient  # noqa: E402
from layang.sending.compose import compose_message  # noqa: E402
from layang.sending.message import Mailbox, OutgoingMessage  # noqa: E402

TEXT = "Hello Ana,\n\nyour order has shipped.\n" * 10
HTML = "<html><body><p>Hello Ana,</p><p>your order has shipped.</p></body></html>" * 5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_sink(port: int) -> subprocess.Popen:
    sink = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "smtp_sink.py"), str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sink.stdout.readline().strip() == "ready"
    return sink


def raw_rate(port: int, count: int) -> float:
    messages = [
        compose_message(
            OutgoingMessage(
                sender=Mailbox("shop@sender.example"),
                subject=f"raw {n}",
                to=(Mailbox(f"r{n}@rcpt.example"),),
                text=TEXT,
                html=HTML,
                date_ms=1_700_000_000_000,
            ),
            f"<raw{n}@sender.example>",
        )
        for n in range(count)
    ]
    started = time.perf_counter()
    with smtplib.SMTP("127.0.0.1", port, local_hostname="bench.local") as smtp:
        for n, message in enumerate(messages):
            smtp.sendmail("shop@sender.example", [f"r{n}@rcpt.example"], message)
    return count / (time.perf_counter() - started)


def fill(config: Config, count: int) -> None:
    from layang.api.transmissions import TransmissionRequestSchema
    from layang.domain import accounts
    from layang.domain.intake import accept_transmission

    account = accounts.create_account("bench", live=True)
    schema = TransmissionRequestSchema()
    for n in range(count):
        request = schema.load(
            {
                "from": {"email": "shop@sender.example", "name": "Shop"},
                "subject": f"layang {n}",
                "to": [{"email": f"r{n}@rcpt.example"}],
                "bodyText": TEXT,
                "bodyHtml": HTML,
            }
        )
        accept_transmission(account, request, config)


def delivered() -> int:
    return Recipient.select().where(Recipient.status == "Delivery").count()


def worker_rate(config: Config, env: dict[str, str], count: int) -> float:
    worker = subprocess.Popen(
        [sys.executable, "-m", "layang", "worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while (start_count := delivered()) == 0:
            time.sleep(0.01)
        started = time.perf_counter()
        while (done := delivered()) < count:
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
    finally:
        worker.terminate()
        worker.wait()
    return (done - start_count) / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="layang-relay-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp),
        LAYANG_RELAY_URL=f"smtp://127.0.0.1:{port}?tls=off",
        LAYANG_LOG_LEVEL="WARNING",
        LAYANG_SECRET_KEY="bench",
        LAYANG_WORKER_BATCH_SIZE="100",
    )
    if args.database_url:
        env["LAYANG_DATABASE_URL"] = args.database_url
    config = Config.from_env(env, dotenv=False)
    open_database(config.database_url)
    upgrade()
    fill(config, args.messages)

    sink = start_sink(port)
    try:
        raw = raw_rate(port, args.messages)
        layang = worker_rate(config, env, args.messages)
    finally:
        sink.terminate()
        sink.wait()
    print(f"{args.messages} text+html messages to a local aiosmtpd sink, one connection each")
    print(f"raw smtplib loop (pre-built bytes): {raw:8.1f} msg/s")
    print(f"one layang worker:                  {layang:8.1f} msg/s")
    print(f"ratio worker/raw: {layang / raw:.2f}")


if __name__ == "__main__":
    main()
