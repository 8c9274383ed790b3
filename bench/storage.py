"""Database bytes per delivered message before and after content expiry, on SQLite and
PostgreSQL; on PostgreSQL, the history tables' weekly partitions. (The database's size over a
simulated 90 days of sending: ``bench/retention.py``.)

1. Bytes per message: N messages are sent and delivered, each going the service's own way:
   submitted through the HTTP API (the Flask app, no network), one recipient and a 5 KB text
   body, delivered by a worker (to a capture directory). The database's compacted size (after
   VACUUM, so free space does not count) grows by A bytes per message; with the process's wall
   clock moved 8 days forward, once retention (``layang.lifecycle.retention.apply``) expired their
   content, by B.

2. Partitions (PostgreSQL, ``--partitions``): the history tables are partitioned by week
   (``layang.lifecycle.partitions``). History is written with SQL (``generate_series``), not
   through the API, as it would be after weeks of sending: one message per ten records, one
   event per record, spread over the 44 days before today, all delivered, in a partition per
   week back to nine weeks ago, plus 1,000 records queued now. Measured:
   - dropping a week's partitions holding --drop-rows records (with their events and messages)
     as retention does (``partitions.drop_before``) against removing another such week's row by
     row, in retention's batches of 1,000 (what it did before, and still does on SQLite);
     --drop-rows 0 leaves it out;
   - the delivery queue's claim (50 records, then handed back), the Activity API's first page
     (``records.list_activity``) and the overview's 24-hour figures (``overview.activity``), in
     two databases, one with --small records in history and one with --history. Each round
     times each of the three once in each database, the two taken in turn (which goes first
     alternating round by round), so that the machine's noise falls on both alike; after two
     rounds not counted, --rounds rounds give each figure's median, minimum and maximum, and the
     ratio of the medians. --keep keeps the two databases (``layang_storage_partitioned_<N>``)
     and uses those an earlier run kept: writing 10,000,000 records took half an hour here.
   - EXPLAIN (ANALYZE) of the claim (the prepared statement the queue runs, and the same SQL
     planned with its values) and of the Activity query in both.

    python bench/storage.py [--messages 1000] [--retention-days 45] [--content-days 7]
                            [--backend sqlite|postgresql|both]
                            [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
    python bench/storage.py --partitions [--history 10000000] [--small 10000]
                            [--drop-rows 1000000] [--rounds 50] [--keep] [--unpartitioned]
    python bench/storage.py --migrate-rows 1000000

3. ``--migrate-rows N``: the time migration 34 takes on a database holding N records (one
   event each, one message per ten) at the schema before it; every row is still there after.
"""

from __future__ import annotations

import argparse
import functools
import json
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.support.storage import (  # noqa: E402
    BODY_BYTES,
    DAY_MS,
    Sender,
    admin,
    compacted_size,
    config_for,
    move_clock,
    shift_clock,
    throwaway,
)
from layang.clock import now_ms  # noqa: E402
from layang.db import database  # noqa: E402
from layang.domain import accounts, overview, records  # noqa: E402
from layang.ids import id_floor  # noqa: E402
from layang.lifecycle import partitions, retention  # noqa: E402
from layang.models import Recipient  # noqa: E402


def run(backend: str, args: argparse.Namespace) -> dict[str, object]:
    """Bytes per delivered message on a new database of ``backend``, content kept and expired."""
    # The clock only ever moves forward: ids are time-ordered and never go back in a process.
    with tempfile.TemporaryDirectory() as tmp, throwaway(backend, args.admin_url, Path(tmp)) as url:
        config = config_for(url, Path(tmp), args.retention_days, args.content_days)
        sender = Sender(config, Path(tmp) / "outbox")
        empty = compacted_size(url)
        sender.send(args.messages)
        delivered = compacted_size(url)
        move_clock(config.content_retention_days + 1)
        removed = retention.apply(config)
        expired = compacted_size(url)
        sender.worker.close()
        database.close()
    return {
        "backend": backend,
        "messages": args.messages,
        "bodyBytes": BODY_BYTES,
        "bytesPerMessageContentKept": round((delivered - empty) / args.messages),
        "bytesPerMessageContentExpired": round((expired - empty) / args.messages),
        "contentsExpired": removed.contents,
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


def history_url(admin_url: str, name: str) -> str:
    parts = urlsplit(admin_url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def build_history(admin_url: str, name: str, records: int, unpartitioned: bool) -> None:
    """Database ``name``: ``records`` delivered records spread over the 44 days before today,
    one partition per week back to nine weeks ago, and 1,000 records queued now. A table
    ``bench_history`` marks it built, so that ``--keep`` can use it again."""
    from layang.db import open_database
    from layang.migrations import MIGRATIONS, upgrade

    admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    admin(admin_url, f'CREATE DATABASE "{name}"')
    open_database(history_url(admin_url, name))
    # --unpartitioned: the schema as it was before migration 34, for comparison.
    upgrade([m for m in MIGRATIONS if m.version < 34] if unpartitioned else MIGRATIONS)
    database.execute_sql(_ULID)
    account = accounts.create_account("bench", live=True)
    today = now_ms() // DAY_MS * DAY_MS
    # As after weeks of sending: a partition per week, back to nine weeks ago.
    for table in partitions.TABLES if not unpartitioned else ():
        database.execute_sql(f'ALTER TABLE "{table.name}" DETACH PARTITION "{table.name}_history"')
        database.execute_sql(f'DROP TABLE "{table.name}_history"')
    if not unpartitioned:
        partitions.make_weeks(partitions.week_of(today - 63 * DAY_MS), partitions.week_of(today))
    started = time.monotonic()
    step = 1_000_000
    for first in range(1, records + 1, step):
        last = min(first + step - 1, records)
        # Each million spread over the same 44 days, as steady sending would.
        fill(account.id, 10_000_000 + first, 10_000_000 + last, today - 44 * DAY_MS, today - 1000)
        print(f"  {name}: filled {last} in {time.monotonic() - started:.0f} s",
              file=sys.stderr, flush=True)  # fmt: skip
    fill(account.id, 1, 1000, now_ms() - 60_000, now_ms() - 1000, queued=True)
    database.execute_sql("VACUUM ANALYZE")
    database.execute_sql(f"CREATE TABLE bench_history AS SELECT {records} AS records")
    database.close()


def history_database(args: argparse.Namespace, records: int) -> str:
    """The URL of a database of ``records`` in history: built now, or with ``--keep`` the one
    an earlier run kept."""
    kind = "unpartitioned" if args.unpartitioned else "partitioned"
    name = f"layang_storage_{kind}_{records}"
    if not args.keep:
        name = f"layang_storage_{secrets.token_hex(4)}"
    url = history_url(args.admin_url, name)
    if args.keep:
        import psycopg2

        try:
            conn = psycopg2.connect(url)
            try:
                built = conn.cursor()
                built.execute("SELECT records FROM bench_history")
                if built.fetchone()[0] == records:
                    print(f"  {name}: kept from an earlier run", file=sys.stderr, flush=True)
                    return url
            finally:
                conn.close()
        except psycopg2.Error:
            pass
    build_history(args.admin_url, name, records, args.unpartitioned)
    return url


def interleaved_times(urls: dict[str, str], rounds: int) -> dict[str, dict[str, list[float]]]:
    """The claim (50 records, then handed back untimed), the Activity API's first page and the
    overview's 24 hours, each timed once per round in every database of ``urls``, the databases
    taken in turn within a round (their order alternating round by round), so that the
    machine's noise falls on all alike. Returns ms per database and measure, one per round."""
    from layang.db import open_database
    from layang.delivery.queue import RECIPIENTS, claim_due_recipients
    from layang.models import Account

    opened = {}
    for label, url in urls.items():
        db = open_database(url)
        RECIPIENTS.release("bench")  # whatever an interrupted run left held
        opened[label] = (db, Account.get(Account.name == "bench"))

    def timed(action) -> float:
        started = time.perf_counter()
        action()
        return (time.perf_counter() - started) * 1000

    def claim() -> None:
        ids = [r.id for r in claim_due_recipients("bench", 50, 60)]
        assert len(ids) == 50
        claimed.extend(ids)

    times: dict[str, dict[str, list[float]]] = {
        label: {"claimMs": [], "activityMs": [], "overviewMs": []} for label in urls
    }
    labels = list(urls)
    for round_ in range(-2, rounds):  # two rounds to warm the caches, not counted
        for label in labels if round_ % 2 == 0 else labels[::-1]:
            db, account = opened[label]
            database.initialize(db)
            claimed: list[str] = []
            measured = {
                "claimMs": timed(claim),
                "activityMs": timed(functools.partial(records.list_activity, account, limit=50)),
                "overviewMs": timed(
                    functools.partial(overview.activity, account, overview.PERIODS["24h"])
                ),
            }
            RECIPIENTS.release("bench", claimed)
            if round_ >= 0:
                for key, value in measured.items():
                    times[label][key].append(value)
    for db, _ in opened.values():
        db.close()
    return times


def summary(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "median": round(statistics.median(values), 2),
        "min": round(values[0], 2),
        "max": round(values[-1], 2),
    }


def plans(account) -> dict[str, list[str]]:
    """EXPLAIN of the claim and Activity statements: which indexes they read. The claim as the
    queue runs it (its prepared statement's generic plan), and as plain SQL, planned with its
    values."""
    from layang.delivery.queue import RECIPIENTS, claim_due_recipients
    from layang.queueing.leases import _claim_sql

    RECIPIENTS.release("bench", [r.id for r in claim_due_recipients("bench", 50, 60)])  # prepared
    now = now_ms()
    claim_values = (now, now, 50, "bench", now + 60_000)  # as LeasedTable.claim gives them
    claim = _claim_sql(RECIPIENTS, True).replace("?", "%s")
    query = records._activity_query(account, None, None, None, None, None)
    activity_sql, params = query.order_by(Recipient.id.desc()).limit(51).sql()
    shown = {}
    for name, sql, values in (
        ("claim", "EXECUTE layang_claim_recipient(%s, %s, %s, %s, %s)", claim_values),
        ("claimPlanned", claim, claim_values),
        ("activity", activity_sql, params),
    ):
        with database.atomic() as transaction:
            database.execute_sql("SET LOCAL plan_cache_mode TO force_generic_plan")
            explain = f"EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) {sql}"
            rows = database.execute_sql(explain, values).fetchall()
            transaction.rollback()
        shown[name] = [row[0] for row in rows]
    return shown


def run_partitions(args: argparse.Namespace) -> dict[str, object]:
    result: dict[str, object] = {"backend": "postgresql", "partitioned": not args.unpartitioned}
    if args.drop_rows:
        result["dropPartition"] = measure_drop(args)
        print(f"  {result['dropPartition']}", file=sys.stderr, flush=True)

    # Query times with a small history and a large one, over the same 44 days, interleaved.
    urls = {"small": history_database(args, args.small)}
    urls["large"] = history_database(args, args.history)
    started = time.monotonic()
    times = interleaved_times(urls, args.rounds)
    measured = {label: {k: summary(v) for k, v in kinds.items()} for label, kinds in times.items()}
    result["queries"] = {
        "rounds": args.rounds,
        "seconds": round(time.monotonic() - started),
        "small": {"records": args.small, **measured["small"]},
        "large": {"records": args.history, **measured["large"]},
        "ratio": {
            k: round(measured["large"][k]["median"] / measured["small"][k]["median"], 2)
            for k in measured["small"]
        },
    }
    print(f"  {json.dumps(result['queries'])}", file=sys.stderr, flush=True)
    from layang.db import open_database
    from layang.models import Account

    result["plans"] = {}
    for label, url in urls.items():
        db = open_database(url)
        result["plans"][label] = plans(Account.get(Account.name == "bench"))
        db.close()
    if not args.keep:
        for url in urls.values():
            name = urlsplit(url).path[1:]
            admin(args.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return result


def measure_drop(args: argparse.Namespace) -> dict[str, object]:
    """A week's partitions holding --drop-rows records dropped whole, against another such
    week removed row by row."""
    with (
        tempfile.TemporaryDirectory() as tmp,
        throwaway("postgresql", args.admin_url, Path(tmp)) as url,
    ):
        from layang.db import open_database
        from layang.migrations import MIGRATIONS, upgrade

        open_database(url)
        upgrade([m for m in MIGRATIONS if m.version < 34] if args.unpartitioned else MIGRATIONS)
        database.execute_sql(_ULID)
        account = accounts.create_account("bench", live=True)
        today = now_ms() // DAY_MS * DAY_MS
        for table in partitions.TABLES if not args.unpartitioned else ():
            database.execute_sql(
                f'ALTER TABLE "{table.name}" DETACH PARTITION "{table.name}_history"'
            )
            database.execute_sql(f'DROP TABLE "{table.name}_history"')
        partitions.make_weeks(partitions.week_of(today - 63 * DAY_MS), partitions.week_of(today))
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
        database.close()
    return {
        "records": n,
        "events": dropped.events,
        "messages": dropped.messages,
        "dropSeconds": round(drop_seconds, 3),
        "rowByRowSeconds": round(delete_seconds, 1),
    }


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
    parser.add_argument("--retention-days", type=int, default=45)
    parser.add_argument("--content-days", type=int, default=7)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--partitions", action="store_true", help="measure partitions (see 2.)")
    parser.add_argument("--history", type=int, default=10_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--drop-rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument(
        "--keep",
        action="store_true",
        help="with --partitions: keep the history databases, and use those an earlier run kept",
    )
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
    shift_clock()
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    for backend in backends:
        print(json.dumps(run(backend, args)), flush=True)


if __name__ == "__main__":
    main()
