"""The console's Overview next to its Activity page at 1,000,000 event records, on SQLite and
PostgreSQL: how long each page takes to answer, and their ratio.

One live account gets N/2 recipients spread over the last 30 days across 3 sending domains
and both streams (a third of the messages broadcast), and N events (each recipient's Delivery
or Bounce, and opens and clicks on a share of them), inserted in batches through the same
tables and triggers as the service's own writes, so the overview's counts are kept as they
would be. Then the signed-in console is asked for each page
--rounds times through the Flask app (no network), and the median is reported; the 30-day
overview once more narrowed to the broadcast stream.

    python bench/overview.py [--records 1000000] [--rounds 20] [--backend sqlite|postgresql|both]
                             [--admin-url postgresql://layang_ci:layang_ci@127.0.0.1:5432/layang_ci]

A throwaway database is made (a temporary file, or a database created through --admin-url and
dropped after). It also reports how long the fill took with and without the counting triggers
on a sample, as the cost they add to each insert.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import secrets
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from layang.config import Config  # noqa: E402
from layang.db import database, is_postgresql, write_transaction  # noqa: E402
from layang.domain import accounts  # noqa: E402
from layang.ids import new_id  # noqa: E402
from layang.models import (  # noqa: E402
    BROADCAST,
    STREAM_PRIORITY,
    TRANSACTIONAL,
    Event,
    Recipient,
    Transmission,
)
from layang.serving.app import create_app  # noqa: E402

DAY_MS = 86_400_000
DOMAINS = ("shop.example", "news.example", "alerts.example")
BATCH = 5000


def admin(url: str, sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
    finally:
        conn.close()


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def fill(account_id: int, events: int, now: int, rng: random.Random) -> float:
    """``events`` events over ``events // 2`` recipients; returns the seconds it took."""
    started = time.perf_counter()
    recipients = events // 2
    made = 0
    while made < recipients:
        count = min(BATCH, recipients - made)
        transmissions, rows, event_rows = [], [], []
        for _ in range(count // 10 or 1):
            at = now - rng.randrange(30 * DAY_MS)
            sender = f"mail@{rng.choice(DOMAINS)}"
            stream = BROADCAST if rng.random() < 1 / 3 else TRANSACTIONAL
            tid = new_id()
            transmissions.append(
                (
                    tid,
                    account_id,
                    at,
                    "api",
                    sender,
                    json.dumps({"email": sender}),
                    "Hi",
                    tid,
                    "{}",
                    stream,
                )
            )
            for _ in range(10):
                rid = new_id()
                rows.append(
                    (
                        rid,
                        tid,
                        account_id,
                        f"r{rid[-8:]}@rcpt{rng.randrange(50)}.test",
                        "to",
                        "Injection",
                        at,
                        at,
                        1,
                        STREAM_PRIORITY[stream],
                    )
                )
                bounced = rng.random() < 0.03
                detail = {"bounceClass": "hard", "reply": "550 5.1.1"} if bounced else {}
                event_rows.append(
                    (rid, "Bounce" if bounced else "Delivery", at + 900, json.dumps(detail))
                )
                extra = rng.random()
                if extra < 0.6:
                    event_rows.append((rid, "Open", at + 60_000, "{}"))
                if extra < 0.4:
                    event_rows.append((rid, "Click", at + 90_000, '{"url": "https://x.test/"}'))
        with write_transaction():
            Transmission.insert_many(
                transmissions,
                fields=[
                    Transmission.id,
                    Transmission.account,
                    Transmission.created_at,
                    Transmission.source,
                    Transmission.mail_from,
                    Transmission.from_header,
                    Transmission.subject,
                    Transmission.message_id,
                    Transmission.metadata,
                    Transmission.stream,
                ],
            ).execute()
            Recipient.insert_many(
                rows,
                fields=[
                    Recipient.id,
                    Recipient.transmission,
                    Recipient.account,
                    Recipient.address,
                    Recipient.recipient_type,
                    Recipient.status,
                    Recipient.created_at,
                    Recipient.updated_at,
                    Recipient.attempts,
                    Recipient.priority,
                ],
            ).execute()
            # Stored as accepted (what counts as sent), then settled, as the worker does.
            param = database.obj.param
            database.execute_sql(
                f'UPDATE "recipient" SET "status" = {param}, "next_attempt_at" = NULL '
                f'WHERE "account_id" = {param} AND "status" = {param}',
                ("Delivery", account_id, "Injection"),
            )
            for start in range(0, len(event_rows), BATCH):
                Event.insert_many(
                    event_rows[start : start + BATCH],
                    fields=[Event.recipient, Event.status, Event.created_at, Event.detail],
                ).execute()
        made += len(rows)
        print(f"\r  {made:,} recipients", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    return time.perf_counter() - started


def trigger_cost(sample: int) -> dict[str, float]:
    """Seconds to store ``sample`` events (and half as many recipients) with the counting
    triggers, then without them, for fresh accounts in the same database."""
    now, rng = int(time.time() * 1000), random.Random(11)
    with_triggers = fill(accounts.create_account("bench-with").id, sample, now, rng)
    on = ' ON "recipient"' if is_postgresql() else ""
    database.execute_sql(f'DROP TRIGGER "activity_count_sent"{on}')
    on = ' ON "event"' if is_postgresql() else ""
    database.execute_sql(f'DROP TRIGGER "activity_count_event"{on}')
    without = fill(accounts.create_account("bench-without").id, sample, now, rng)
    return {
        "events": sample,
        "with_s": round(with_triggers, 2),
        "without_s": round(without, 2),
        "ratio": round(with_triggers / without, 2),
    }


def timed(client, path: str, rounds: int) -> tuple[float, int]:
    times, size = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code)
        size = len(response.data)
    return statistics.median(times), size


def run(url: str, data_dir: Path, records: int, rounds: int) -> dict[str, object]:
    config = Config(
        data_dir=data_dir,
        database_url=url,
        relay_url=f"capture:{data_dir}/out",
        public_url="http://127.0.0.1:8000",
        secret_key="bench-secret-key",
    )
    app = create_app(config)
    with app.app_context():
        account = accounts.create_account("bench", live=True)
        key = accounts.create_api_key(account)[1]
        now = int(time.time() * 1000)
        rng = random.Random(7)
        fill_seconds = fill(account.id, records, now, rng)
        events = Event.select().count()
        database.execute_sql("ANALYZE")
    client = app.test_client()
    page = client.get("/console/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    client.post("/console/login", data={"csrf_token": token, "api_key": key})
    result: dict[str, object] = {"events": events, "fill_s": round(fill_seconds, 1)}
    for name, path in (
        ("overview_24h", "/console/overview?period=24h"),
        ("overview_7d", "/console/overview?period=7d"),
        ("overview_30d", "/console/overview?period=30d"),
        ("overview_30d_broadcast", "/console/overview?period=30d&stream=broadcast"),
        ("activity", "/console/activity"),
    ):
        ms, size = timed(client, path, rounds)
        result[name] = {"median_ms": round(ms, 1), "bytes": size}
    result["ratio_30d_to_activity"] = round(
        result["overview_30d"]["median_ms"] / result["activity"]["median_ms"], 2
    )
    with app.app_context():
        result["trigger_cost"] = trigger_cost(min(records, 100_000))
    database.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument(
        "--admin-url", default="postgresql://layang_ci:layang_ci@127.0.0.1:5432/layang_ci"
    )
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.backend in ("sqlite", "both"):
            print("sqlite: filling", file=sys.stderr)
            url = f"sqlite:///{tmp}/bench.db"
            results["sqlite"] = run(url, Path(tmp), args.records, args.rounds)
            report("sqlite", results["sqlite"])
        if args.backend in ("postgresql", "both"):
            name = f"layang_bench_{secrets.token_hex(4)}"
            admin(args.admin_url, f'CREATE DATABASE "{name}"')
            try:
                print("postgresql: filling", file=sys.stderr)
                url = with_database(args.admin_url, name)
                results["postgresql"] = run(url, Path(tmp), args.records, args.rounds)
                report("postgresql", results["postgresql"])
            finally:
                admin(args.admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(json.dumps(results, indent=2))


def report(backend: str, result: dict[str, object]) -> None:
    """Each backend's figures as soon as they are known, on stderr (the service logs to stdout)."""
    print(f"{backend}: {json.dumps(result)}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
