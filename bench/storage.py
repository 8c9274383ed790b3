"""Database bytes per delivered message before and after content expiry, and database size over
a simulated 90 days of steady sending, on SQLite and PostgreSQL.

Every message goes the service's own way: submitted through the HTTP API (the Flask app, no
network), one recipient and a 5 KB text body, delivered by a worker (to a capture directory),
then aged by retention (``layang.lifecycle.retention.apply``, what the workers and ``layang
retention run --as-of`` run). The process's wall clock is moved forward a day at a time, so ids,
timestamps and retention all see the simulated date.

1. Bytes per message: N messages are sent and delivered; the database's compacted size (after
   VACUUM, so free space does not count) grows by A bytes per message; 8 days later, once
   retention expired their content, by B.
2. Size over time: --per-day messages a day for --days days, retention applied at the end of each
   day (plain VACUUM on PostgreSQL, as autovacuum would, so freed space is reused); the size of
   the database on disk every ten days. With the defaults (45 days of records, 7 of content) it
   grows for 45 days, then stays flat.

3. Partitions (PostgreSQL, ``--partitions``): the history tables are partitioned by week
   (``layang.lifecycle.partitions``). History is written with SQL (``generate_series``), not
   through the API, as it would be after weeks of sending: one message per ten records, one
   event per record, spread over the 44 days before today, all delivered, plus 1,000 records
   queued now. Measured:
   - dropping a week's partitions holding --drop-rows records (with their events and messages)
     as retention does (``partitions.drop_before``) against removing another such week's row by
     row, in retention's batches of 1,000 (what it did before, and still does on SQLite);
   - the delivery queue's claim (50 records, then handed back), the Activity API's first page
     (``records.list_activity``) and the overview's 24-hour figures (``overview.activity``),
     median of --rounds runs, with --small records in history, then with --history.

    python bench/storage.py [--messages 1000] [--per-day 100] [--days 90] [--every 10]
                            [--retention-days 45] [--content-days 7]
                            [--backend sqlite|postgresql|both]
                            [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
    python bench/storage.py --partitions [--history 10000000] [--small 10000]
                            [--drop-rows 1000000] [--rounds 20] [--unpartitioned]
    python bench/storage.py --migrate-rows 1000000

4. ``--migrate-rows N``: the time migration 34 takes on a database holding N records (one
   event each, one message per ten) at the schema before it; every row is still there after.
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
from layang.db import database, id_floor, is_postgresql  # noqa: E402
from layang.delivery.worker import Worker  # noqa: E402
from layang.domain import accounts, overview, records  # noqa: E402
from layang.lifecycle import partitions, retention  # noqa: E402
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
            partitions.make_ahead()  # as the workers do
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


# -- partitions ---------------------------------------------------------------------------------

_ULID = """CREATE FUNCTION pg_temp.ulid(ms bigint, n bigint) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
SELECT string_agg(substr('0123456789abcdefghjkmnpqrstvwxyz', ((ms >> (5 * (9 - k))) & 31)::int + 1,
                         1), '' ORDER BY k) || lpad(n::text, 16, '0')
FROM generate_series(0, 9) AS k $$"""


def fill(
    account_id: int, first: int, last: int, begin: int, end: int, queued: bool = False
) -> None:
    """Records ``first``..``last`` (numbers), made evenly from ``begin`` to ``end`` (epoch ms),
    one message per ten and one event each, written by SQL in one statement per table."""
    span = max(end - begin, 1)
    count = last - first + 1
    made = f"({begin} + (n - {first})::bigint * {span} / {count})"
    state = "'Delay'" if queued else "'Delivery'"
    due = made if queued else "NULL"
    database.execute_sql(
        'INSERT INTO "transmission" ("id", "account_id", "created_at", "source", "mail_from", '
        '"from_header", "subject", "message_id", "metadata") '
        f"SELECT pg_temp.ulid({made}, n), {account_id}, {made}, 'api', 'shop@sender.example', "
        "'{\"email\": \"shop@sender.example\"}', 'Your receipt', '<' || n || '@bench>', '{}' "
        f"FROM generate_series({first}, {last}) AS n WHERE n %% 10 = {first} %% 10"
    )
    database.execute_sql(
        'INSERT INTO "recipient" ("id", "transmission_id", "account_id", "address", '
        '"recipient_type", "status", "created_at", "updated_at", "attempts", "next_attempt_at", '
        '"domain") '
        f"SELECT pg_temp.ulid({made}, n), "
        f"pg_temp.ulid({begin} + (m - {first})::bigint * {span} / {count}, m), {account_id}, "
        f"'customer' || n || '@rcpt.example', 'to', {state}, {made}, {made} + 1000, 1, {due}, "
        "'rcpt.example' "
        f"FROM generate_series({first}, {last}) AS n, "
        f"LATERAL (SELECT n - ((n - {first}) %% 10) AS m) AS message"
    )
    database.execute_sql(
        'INSERT INTO "event" ("recipient_id", "status", "created_at", "detail") '
        f"SELECT pg_temp.ulid({made}, n), {state}, {made} + 1000, '{{}}' "
        f"FROM generate_series({first}, {last}) AS n"
    )


def median_ms(action, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return round(times[len(times) // 2], 2)


def query_times(account, rounds: int) -> dict[str, float]:
    from layang.delivery.queue import RECIPIENTS, claim_due_recipients

    def claim() -> list[str]:
        return [r.id for r in claim_due_recipients("bench", 50, 60)]

    def timed_claim() -> float:
        started = time.perf_counter()
        ids = claim()
        elapsed = (time.perf_counter() - started) * 1000
        assert len(ids) == 50
        RECIPIENTS.release("bench", ids)  # handed back untimed, for the next round
        return elapsed

    timed_claim()  # warm the caches once
    records.list_activity(account, limit=50)
    claims = sorted(timed_claim() for _ in range(rounds))
    return {
        "claimMs": round(claims[len(claims) // 2], 2),
        "activityMs": median_ms(lambda: records.list_activity(account, limit=50), rounds),
        "overviewMs": median_ms(
            lambda: overview.activity(account, overview.PERIODS["24h"]), rounds
        ),
    }


def plans(account) -> dict[str, list[str]]:
    """EXPLAIN of the claim and Activity statements: which indexes they read."""
    from layang.delivery.queue import RECIPIENTS
    from layang.queueing.leases import _claim_sql

    now = now_ms()
    claim = _claim_sql(RECIPIENTS, True).replace("?", "%s")
    query = records._activity_query(account, None, None, None, None, None)
    activity_sql, params = query.order_by(Recipient.id.desc()).limit(51).sql()
    shown = {}
    for name, sql, values in (
        ("claim", claim, ("bench", now + 60_000, now, now, 50)),
        ("activity", activity_sql, params),
    ):
        with database.atomic() as transaction:
            rows = database.execute_sql(f"EXPLAIN (ANALYZE, COSTS OFF) {sql}", values).fetchall()
            transaction.rollback()
        shown[name] = [row[0] for row in rows]
    return shown


def run_partitions(args: argparse.Namespace) -> dict[str, object]:
    with (
        tempfile.TemporaryDirectory() as tmp,
        throwaway("postgresql", args.admin_url, Path(tmp)) as url,
    ):
        from layang.db import open_database
        from layang.migrations import MIGRATIONS, upgrade

        open_database(url)
        # --unpartitioned: the schema as it was before migration 34, for comparison.
        upgrade([m for m in MIGRATIONS if m.version < 34] if args.unpartitioned else MIGRATIONS)
        database.execute_sql(_ULID)
        account = accounts.create_account("bench", live=True)
        today = now_ms() // DAY_MS * DAY_MS
        # As after weeks of sending: a partition per week, back to nine weeks ago.
        for table in partitions.TABLES if not args.unpartitioned else ():
            database.execute_sql(
                f'ALTER TABLE "{table.name}" DETACH PARTITION "{table.name}_history"'
            )
            database.execute_sql(f'DROP TABLE "{table.name}_history"')
        partitions.make_weeks(partitions.week_of(today - 63 * DAY_MS), partitions.week_of(today))
        result: dict[str, object] = {"backend": "postgresql", "partitioned": not args.unpartitioned}

        # A week dropped whole against a week removed row by row.
        n = args.drop_rows
        week = partitions.WEEK_MS
        dropped_week = partitions.week_of(today - 63 * DAY_MS)
        deleted_week = dropped_week + week
        started = time.monotonic()
        fill(account.id, 1, n, dropped_week + 1000, dropped_week + week - 1000)
        fill(account.id, n + 1, 2 * n, deleted_week + 1000, deleted_week + week - 1000)
        database.execute_sql("VACUUM ANALYZE")
        print(f"  filled 2 weeks of {n} records in {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
        started = time.perf_counter()
        dropped = partitions.drop_before(dropped_week + week)
        drop_seconds = time.perf_counter() - started
        assert dropped.records == (0 if args.unpartitioned else n), dropped
        started = time.perf_counter()
        removed = retention._remove_records(
            account, id_floor(deleted_week + week), retention._Budget(None)
        )
        delete_seconds = time.perf_counter() - started
        # Unpartitioned, the first day is still there and goes with the second.
        assert removed.records == (2 * n if args.unpartitioned else n), removed
        result["dropPartition"] = {
            "records": n,
            "events": dropped.events,
            "messages": dropped.messages,
            "dropSeconds": round(drop_seconds, 3),
            "rowByRowSeconds": round(delete_seconds, 1),
        }
        print(f"  {result['dropPartition']}", file=sys.stderr, flush=True)

        # Query times with a small history, then a large one, over the same 44 days.
        first, last = 10_000_001, 10_000_000 + args.small
        history_begins, history_ends = today - 44 * DAY_MS, today - 1000
        fill(account.id, first, last, history_begins, history_ends)
        fill(account.id, 1, 1000, now_ms() - 60_000, now_ms() - 1000, queued=True)
        database.execute_sql("VACUUM ANALYZE")
        small = query_times(account, args.rounds)
        small_plans = plans(account)
        print(f"  {args.small} in history: {small}", file=sys.stderr, flush=True)
        started = time.monotonic()
        step = 1_000_000
        for begin in range(last + 1, 10_000_000 + args.history + 1, step):
            end = min(begin + step - 1, 10_000_000 + args.history)
            # Each million spread over the same 44 days, as steady sending would.
            fill(account.id, begin, end, history_begins, history_ends)
            held = end - 10_000_000
            print(f"  filled up to {held}: {time.monotonic() - started:.0f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
            if held // step in (1, 2, 5) and held % step < args.small + 1:  # on the way
                database.execute_sql("ANALYZE")
                print(f"  {held} in history: {query_times(account, args.rounds)}",
                      file=sys.stderr, flush=True)  # fmt: skip
        database.execute_sql("VACUUM ANALYZE")
        large = query_times(account, args.rounds)
        print(f"  {args.history} in history: {large}", file=sys.stderr, flush=True)
        result["queries"] = {
            "small": {"records": args.small, **small},
            "large": {"records": args.history, **large},
            "ratio": {k: round(large[k] / small[k], 2) for k in small},
            "fillSeconds": round(time.monotonic() - started),
        }
        result["plans"] = {"small": small_plans, "large": plans(account)}
        database.close()
    return result


def run_migration(args: argparse.Namespace) -> dict[str, object]:
    """How long migration 34 takes on a database holding --migrate-rows records (and their
    events and messages, as ``fill`` writes them) spread over the last 44 days."""
    from layang.db import open_database
    from layang.migrations import MIGRATIONS, upgrade

    with (
        tempfile.TemporaryDirectory() as tmp,
        throwaway("postgresql", args.admin_url, Path(tmp)) as url,
    ):
        open_database(url)
        upgrade([m for m in MIGRATIONS if m.version < 34])
        database.execute_sql(_ULID)
        account = accounts.create_account("bench", live=True)
        today = now_ms() // DAY_MS * DAY_MS
        for begin in range(1, args.migrate_rows + 1, 1_000_000):
            end = min(begin + 999_999, args.migrate_rows)
            fill(account.id, begin, end, today - 44 * DAY_MS, today - 1000)
        database.execute_sql("VACUUM ANALYZE")
        counts = {t.name: _count(t.name) for t in partitions.TABLES}
        started = time.monotonic()
        assert upgrade() == [34]
        seconds = time.monotonic() - started
        assert {t.name: _count(t.name) for t in partitions.TABLES} == counts
        database.close()
    return {
        "backend": "postgresql",
        "records": args.migrate_rows,
        "migrationSeconds": round(seconds, 1),
    }


def _count(table: str) -> int:
    return database.execute_sql(f'SELECT count(*) FROM "{table}"').fetchone()[0]


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
    parser.add_argument("--partitions", action="store_true", help="measure partitions (see 3.)")
    parser.add_argument("--history", type=int, default=10_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--drop-rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--unpartitioned", action="store_true", help="with --partitions: the schema before them"
    )
    parser.add_argument(
        "--migrate-rows", type=int, default=0, help="time migration 34 on this many records"
    )
    args = parser.parse_args()
    if args.partitions:
        print(json.dumps(run_partitions(args)), flush=True)
        return
    if args.migrate_rows:
        print(json.dumps(run_migration(args)), flush=True)
        return
    time.time_ns = _shifted_time_ns
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    for backend in backends:
        print(json.dumps(run(backend, args)), flush=True)


if __name__ == "__main__":
    main()
