"""Delivery rate with 1, 2 and 4 `layang worker` processes on one PostgreSQL, next to a raw smtplib
loop to the same local SMTP sink in the same run.

The sink is Postfix's `smtp-sink` when installed (Debian: `apt-get install postfix`), otherwise
the aiosmtpd sink in `bench/smtp_sink.py`. For each worker count the queue is emptied, the
workers are started and left idle, then N text+HTML messages are committed at once; the rate is
N over the time from that commit until the last one is recorded as delivered.

    python bench/scale.py [--messages 3000] [--workers 1,2,4] [--rounds 3] [--database-url URL]
                          [--admin-url postgresql://postgres@127.0.0.1:5432/postgres]
                          [--sink auto|smtp-sink|aiosmtpd]

Without --database-url a throwaway database is created through --admin-url and dropped after.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.support.machine import free_port, machine_cpu  # noqa: E402
from bench.support.queue import fill  # noqa: E402
from bench.support.sinks import raw_rate, start_any_sink  # noqa: E402
from layang.config import Config  # noqa: E402
from layang.db import database, open_database  # noqa: E402
from layang.migrations import upgrade  # noqa: E402
from layang.models import Recipient  # noqa: E402

TABLES = ("event", "recipient", "transmission", "api_key", "account")
cpu_ms: dict[int, list[float]] = {}


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


def delivered() -> int:
    return Recipient.select().where(Recipient.status == "Delivery").count()


def workers_rate(
    config: Config, env: dict[str, str], count: int, workers: int, logs: Path
) -> float:
    """Deliveries per second of ``workers`` processes draining ``count`` messages."""
    database.execute_sql(f"TRUNCATE {', '.join(TABLES)} RESTART IDENTITY CASCADE")
    paths = [logs / f"w{workers}-{n}.log" for n in range(workers)]
    processes = []
    for path in paths:
        with open(path, "wb") as log:
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "layang", "worker"],
                    cwd=ROOT,
                    env=env,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        deadline = time.monotonic() + 60
        while not all(p.exists() and "worker started" in p.read_text() for p in paths):
            if time.monotonic() > deadline:
                raise SystemExit("the workers did not start")
            time.sleep(0.05)
        with database.atomic():
            fill(config, count)
        started = time.perf_counter()
        busy = machine_cpu()
        # Not too often: each look is a COUNT on the database the workers are busy with.
        while delivered() < count:
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        cpu_ms[workers].append((machine_cpu() - busy) * 1000 / count)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--sink", choices=("auto", "smtp-sink", "aiosmtpd"), default="auto")
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]

    throwaway = ""
    database_url = args.database_url
    if not database_url:
        throwaway = f"layang_bench_{secrets.token_hex(4)}"
        admin(args.admin_url, f'CREATE DATABASE "{throwaway}"')
        database_url = with_database(args.admin_url, throwaway)
    tmp = Path(tempfile.mkdtemp(prefix="layang-scale-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp),
        LAYANG_DATABASE_URL=database_url,
        LAYANG_RELAY_URL=f"smtp://127.0.0.1:{port}?tls=off",
        LAYANG_LOG_LEVEL="INFO",
        LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
        LAYANG_WORKER_POLL_SECONDS="0.05",
    )
    config = Config.from_env(env, dotenv=False)
    open_database(config.database_url)
    upgrade()

    sink, sink_name = start_any_sink(port, args.sink)
    raws: list[float] = []
    samples: dict[int, list[float]] = {n: [] for n in counts}
    cpu_ms.update({n: [] for n in counts})
    try:
        # Alternating rounds, so that a busy moment of the machine does not land on one figure.
        for _ in range(args.rounds):
            raws.append(raw_rate(port, args.messages))
            for n in counts:
                samples[n].append(workers_rate(config, env, args.messages, n, tmp))
    finally:
        sink.terminate()
        sink.wait()
        database.close()
        if throwaway:
            admin(args.admin_url, f'DROP DATABASE IF EXISTS "{throwaway}" WITH (FORCE)')

    raw = statistics.median(raws)
    rates = {n: statistics.median(values) for n, values in samples.items()}
    print(
        f"{args.messages} text+html messages to {sink_name} on 127.0.0.1, PostgreSQL, "
        f"{os.cpu_count()} CPU cores, one SMTP connection per worker; "
        f"medians of {args.rounds} rounds"
    )
    print(f"{'raw smtplib loop (pre-built bytes, one process):':50} {raw:8.1f} msg/s")
    for n, rate in rates.items():
        label = f"{n} layang worker process{'es' if n > 1 else ''}:"
        cpu = statistics.median(cpu_ms[n])
        print(f"{label:50} {rate:8.1f} msg/s, whole machine {cpu:.3f} ms CPU per message")
    if 1 in rates:
        print(f"ratio 1 worker/raw: {rates[1] / raw:.2f}")
        for n in counts:
            if n != 1:
                print(f"ratio {n} workers/1 worker: {rates[n] / rates[1]:.2f}")


if __name__ == "__main__":
    main()
