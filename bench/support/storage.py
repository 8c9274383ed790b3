"""What the storage benchmarks (``bench/storage.py``, ``bench/retention.py``) share: a
throwaway database, its size, a sender going the service's own way (the HTTP API, then a
worker), and this process's wall clock moved forward."""

from __future__ import annotations

import logging
import secrets
import shutil
import string
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from layang.config import Config
from layang.db import database, is_postgresql
from layang.delivery.worker import Worker
from layang.domain import accounts
from layang.models import Recipient
from layang.serving.app import create_app

DAY_MS = 86_400_000
BODY_BYTES = 5 * 1024
_real_time_ns = time.time_ns
_shift_ns = 0


def _shifted_time_ns() -> int:
    return _real_time_ns() + _shift_ns


def move_clock(days: float) -> None:
    """Move this process's wall clock ``days`` forward (monotonic clocks are left alone)."""
    global _shift_ns
    _shift_ns += int(days * DAY_MS) * 1_000_000


def admin(url: str, sql: str) -> None:
    """Run ``sql`` on the server at ``url`` outside a transaction (CREATE or DROP DATABASE)."""
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        conn.cursor().execute(sql)
    finally:
        conn.close()


@contextmanager
def throwaway(backend: str, admin_url: str, folder: Path) -> Iterator[str]:
    if backend == "sqlite":
        yield f"sqlite:///{folder / 'layang.db'}"
        return
    name = f"layang_storage_{secrets.token_hex(4)}"
    admin(admin_url, f'CREATE DATABASE "{name}"')
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    finally:
        database.close()
        admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def size_on_disk(url: str) -> int:
    """The database's size as the file system sees it: SQLite's file after a checkpoint, or on
    PostgreSQL every table of the schema with its indexes and TOAST (not the catalogs)."""
    if is_postgresql():
        return database.execute_sql(
            "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c JOIN pg_namespace n "
            "ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        ).fetchone()[0]
    database.execute_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    return Path(url.split(":///", 1)[1]).stat().st_size


def compacted_size(url: str) -> int:
    """The database's size once VACUUM has given free space back: the bytes its data needs."""
    if is_postgresql():
        database.execute_sql("VACUUM FULL")
    else:
        database.execute_sql("VACUUM")
    return size_on_disk(url)


def body() -> str:
    words = []
    while sum(len(w) + 1 for w in words) < BODY_BYTES:
        words.append("".join(secrets.choice(string.ascii_lowercase) for _ in range(7)))
    return " ".join(words)[:BODY_BYTES]


class Sender:
    def __init__(self, config: Config, outbox: Path) -> None:
        self.app = create_app(config)
        logging.getLogger("layang").setLevel(logging.WARNING)  # one line per message otherwise
        self.client = self.app.test_client()
        account = accounts.create_account("bench", live=True)
        self.auth = {"Authorization": f"Bearer {accounts.create_api_key(account)[1]}"}
        self.worker = Worker(config, name="bench-worker")
        self.outbox = outbox
        self.sent = 0

    def send(self, count: int) -> None:
        for _ in range(count):
            response = self.client.post(
                "/v1/layang/transmissions",
                headers=self.auth,
                json={
                    "from": {"email": "shop@sender.example"},
                    "subject": "Your receipt",
                    "to": [{"email": f"customer{self.sent}@rcpt.example"}],
                    "bodyText": body(),
                },
            )
            assert response.status_code == 200, response.get_json()
            self.sent += 1
        while self.worker.run_once():
            pass
        queued = Recipient.select().where(Recipient.next_attempt_at.is_null(False)).count()
        assert queued == 0, f"{queued} messages were not delivered"
        shutil.rmtree(self.outbox, ignore_errors=True)
        self.outbox.mkdir()


def config_for(url: str, folder: Path, retention_days: int, content_days: int) -> Config:
    """The service's settings for a benchmark on ``url``, delivering to ``folder/outbox``."""
    outbox = folder / "outbox"
    outbox.mkdir(exist_ok=True)
    return Config(
        data_dir=folder,
        database_url=url,
        relay_url=f"capture:{outbox}",
        secret_key=secrets.token_urlsafe(32),
        retention_days=retention_days,
        content_retention_days=content_days,
    )


def shift_clock() -> None:
    """From now on, this process's wall clock is the one :func:`move_clock` moves."""
    time.time_ns = _shifted_time_ns
