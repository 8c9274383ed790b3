"""Database bytes per delivered message before and after content expiry, and database size over
a simulated 90 days of steady sending, on SQLite and PostgreSQL.

Every message goes the service's own way: submitted through the HTTP API (the Flask app, no
network), one recipient and a 5 KB text body, delivered by a worker (to a capture directory),
then aged by retention (``layang.domain.retention.apply``, what the workers and ``layang retention
run --as-of`` run). The process's wall clock is moved forward a day at a time, so ids, timestamps
and retention all see the simulated date.

1. Bytes per message: N messages are sent and delivered; the database's compacted size (after
   VACUUM, so free space does not count) grows by A bytes per message; 8 days later, once
   retention expired their content, by B.
2. Size over time: --per-day messages a day for --days days, retention applied at the end of each
   day (plain VACUUM on PostgreSQL, as autovacuum would, so freed space is reused); the size of
   the database on disk every ten days. With the defaults (45 days of records, 7 of content) it
   grows for 45 days, then stays flat.

    python bench/storage.py [--messages 1000] [--per-day 100] [--days 90] [--every 10]
                            [--retention-days 45] [--content-days 7]
                            [--backend sqlite|postgresql|both]
                            [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import json
import logging
import secrets
import shutil
import string
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from layang.clock import now_ms  # noqa: E402
from layang.config import Config  # noqa: E402
from layang.db import database, is_postgresql  # noqa: E402
from layang.delivery.worker import Worker  # noqa: E402
from layang.domain import accounts, retention  # noqa: E402
from layang.models import Recipient  # noqa: E402
from layang.serving.app import create_app  # noqa: E402

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


def run(backend: str, args: argparse.Namespace) -> dict[str, object]:
    # The clock only ever moves forward: ids are time-ordered and never go back in a process.
    with tempfile.TemporaryDirectory() as tmp, throwaway(backend, args.admin_url, Path(tmp)) as url:
        outbox = Path(tmp) / "outbox"
        outbox.mkdir()
        config = Config(
            data_dir=Path(tmp),
            database_url=url,
            relay_url=f"capture:{outbox}",
            secret_key=secrets.token_urlsafe(32),
            retention_days=args.retention_days,
            content_retention_days=args.content_days,
        )
        sender = Sender(config, outbox)
        empty = compacted_size(url)
        sender.send(args.messages)
        delivered = compacted_size(url)
        move_clock(config.content_retention_days + 1)
        removed = retention.apply(config)
        expired = compacted_size(url)
        per_message = {
            "bytesPerMessageContentKept": round((delivered - empty) / args.messages),
            "bytesPerMessageContentExpired": round((expired - empty) / args.messages),
            "contentsExpired": removed.contents,
        }
        sender.worker.close()
        database.close()

    with tempfile.TemporaryDirectory() as tmp, throwaway(backend, args.admin_url, Path(tmp)) as url:
        outbox = Path(tmp) / "outbox"
        outbox.mkdir()
        config = Config(
            data_dir=Path(tmp),
            database_url=url,
            relay_url=f"capture:{outbox}",
            secret_key=secrets.token_urlsafe(32),
            retention_days=args.retention_days,
            content_retention_days=args.content_days,
        )
        sender = Sender(config, outbox)
        sizes = []
        started = time.monotonic()
        for day in range(1, args.days + 1):
            sender.send(args.per_day)
            move_clock(1)
            retention.apply(config, now_ms())
            if is_postgresql():
                database.execute_sql("VACUUM")  # what autovacuum does, on time
            if day % args.every == 0 or day == args.days:
                records = Recipient.select().count()
                sizes.append({"day": day, "bytes": size_on_disk(url), "records": records})
                print(f"  {backend} day {day}: {sizes[-1]}", file=sys.stderr, flush=True)
        sender.worker.close()
        database.close()
    return {
        "backend": backend,
        "messages": args.messages,
        "bodyBytes": BODY_BYTES,
        **per_message,
        "perDay": args.per_day,
        "retentionDays": config.retention_days,
        "contentRetentionDays": config.content_retention_days,
        "sizeByDay": sizes,
        "seconds": round(time.monotonic() - started),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--per-day", type=int, default=100)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--retention-days", type=int, default=45)
    parser.add_argument("--content-days", type=int, default=7)
    parser.add_argument("--every", type=int, default=10, help="report the size every N days")
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    time.time_ns = _shifted_time_ns
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    for backend in backends:
        print(json.dumps(run(backend, args)), flush=True)


if __name__ == "__main__":
    main()
