"""A Layang queue for a benchmark: the messages, filling the queue through the domain's intake,
reading a worker's delivered count from its metrics, and emptying the database between runs."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

from layang.config import Config
from layang.db import database, open_database
from layang.mail.message import Mailbox, OutgoingMessage
from layang.migrations import upgrade

SENDER = "shop@sender.example"
TEXT = "Hello Ana,\n\nyour order has shipped.\n" * 10
HTML = "<html><body><p>Hello Ana,</p><p>your order has shipped.</p></body></html>" * 5
TABLES = ("event", "recipient", "transmission", "suppression", "api_key", "account")
_DELIVERED = re.compile(r'layang_worker_outcomes_total\{status="Delivery"\} ([0-9.e+]+)')


def message(n: int) -> OutgoingMessage:
    return OutgoingMessage(
        sender=Mailbox("shop@sender.example", "Shop"),
        subject=f"layang {n}",
        to=(Mailbox(f"r{n}@rcpt.example"),),
        text=TEXT,
        html=HTML,
        date_ms=1_700_000_000_000,
    )


def outgoing(n: int, recipients: int):
    return OutgoingMessage(
        sender=Mailbox(SENDER, "Shop"),
        subject=f"layang {n}",
        to=tuple(Mailbox(f"r{n}.{k}@rcpt.example") for k in range(recipients)),
        text=TEXT,
        html=HTML,
        date_ms=1_700_000_000_000,
    )


def fill(config: Config, count: int, suppressed: int = 0) -> None:
    """Queue ``count`` messages through the domain's intake, in one transaction, after listing
    ``suppressed`` other addresses as suppressed."""
    from layang.db import insert_rows
    from layang.domain import accounts
    from layang.domain.intake import TransmissionRequest, accept_transmission
    from layang.ids import new_id
    from layang.models import Suppression

    account = accounts.create_account(f"bench{time.monotonic_ns()}", live=True)
    fields = ("id", "account", "email", "email_key", "reason", "detail", "note", "created_at")
    with database.atomic():
        for start in range(0, suppressed, 500):
            rows = [
                (
                    new_id(),
                    account.id,
                    f"s{n}@gone.example",
                    f"s{n}@gone.example",
                    "manual",
                    "",
                    "",
                    0,
                )
                for n in range(start, min(start + 500, suppressed))
            ]
            insert_rows(Suppression, fields, rows)
        for n in range(count):
            accept_transmission(account, TransmissionRequest(message(n)), config)


def delivered_so_far(metrics_port: int) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as r:
            match = _DELIVERED.search(r.read().decode())
    except OSError:
        return 0
    return int(float(match.group(1))) if match else 0


def reset(database_url: str, data_dir: Path) -> None:
    if database_url.startswith("postgres"):
        database.execute_sql(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    else:
        database.close()
        for path in data_dir.glob("layang.db*"):
            path.unlink()
        open_database(database_url)
        upgrade()
