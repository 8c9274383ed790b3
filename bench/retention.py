"""Database size over a simulated 90 days of steady sending, on SQLite and PostgreSQL: after the
retention period it stops growing.

Every message goes the service's own way: submitted through the HTTP API (the Flask app, no
network), one recipient and a 5 KB text body, delivered by a worker (to a capture directory).
The process's wall clock is moved forward a day at a time, so ids, timestamps, partitions and
retention all see the simulated date. Each day: the week's partitions made ahead (PostgreSQL, as
the workers do), --per-day messages sent and delivered, the clock moved a day, retention applied
(``layang.lifecycle.retention.apply``, what the workers and ``layang retention run --as-of`` run),
then on PostgreSQL a plain VACUUM (what autovacuum does, on time: freed space is reused). The
database's size on disk (SQLite's file; PostgreSQL's tables with their indexes and TOAST) and its
record count are printed every --every days.

With the defaults (45 days of records, 7 of content) the SQLite database grows for 45 days, then
stays flat. On PostgreSQL the history tables are partitioned by week and retention drops a week
once its last day is past the horizon, so it holds up to 7 days more than the retention period
and its size moves in weekly steps within a bound.

    python bench/retention.py [--per-day 100] [--days 90] [--every 10]
                              [--retention-days 45] [--content-days 7]
                              [--backend sqlite|postgresql|both]
                              [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.support.storage import (  # noqa: E402
    Sender,
    config_for,
    move_clock,
    shift_clock,
    size_on_disk,
    throwaway,
)
from layang.clock import now_ms  # noqa: E402
from layang.db import database, is_postgresql  # noqa: E402
from layang.lifecycle import partitions, retention  # noqa: E402
from layang.models import Recipient  # noqa: E402


def run(backend: str, args: argparse.Namespace) -> dict[str, object]:
    """Send --per-day messages a day for --days days on a new database of ``backend``; returns
    its size every --every days."""
    # The clock only ever moves forward: ids are time-ordered and never go back in a process.
    with tempfile.TemporaryDirectory() as tmp, throwaway(backend, args.admin_url, Path(tmp)) as url:
        config = config_for(url, Path(tmp), args.retention_days, args.content_days)
        sender = Sender(config, Path(tmp) / "outbox")
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
        "perDay": args.per_day,
        "retentionDays": config.retention_days,
        "contentRetentionDays": config.content_retention_days,
        "sizeByDay": sizes,
        "seconds": round(time.monotonic() - started),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-day", type=int, default=100)
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--retention-days", type=int, default=45)
    parser.add_argument("--content-days", type=int, default=7)
    parser.add_argument("--every", type=int, default=10, help="report the size every N days")
    parser.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    shift_clock()
    backends = ("sqlite", "postgresql") if args.backend == "both" else (args.backend,)
    for backend in backends:
        print(json.dumps(run(backend, args)), flush=True)


if __name__ == "__main__":
    main()
