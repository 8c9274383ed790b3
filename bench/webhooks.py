"""Webhook dispatch rate against the mail relay rate, and what webhooks cost the mail path.

In one run, on fresh databases of ``--count`` queued text+HTML messages each:

1. intake: messages accepted with the webhook outbox statement left out (the code before
   webhooks) vs. as shipped with no endpoint anywhere vs. with an endpoint on the account (each
   accepted message then also writes its Injection event), median of 3 interleaved rounds;
2. one `layang worker` process relays the queue with no webhook endpoint: the mail rate;
3. the same with an endpoint subscribed to every event, answered by a local HTTP receiver: the
   mail rate while webhooks are busy, and the dispatch rate (events delivered per second, from
   the worker's start until the receiver has all 2 x count events: each message's Injection and
   Delivery), as a ratio of the mail rate of run 2.

    python bench/webhooks.py [--count 3000] [--database-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's folder comes first on the path: keep it off, so that no bench
# script's name can stand for a package the code imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.support.http_counter import counted, serve_counter, start_counter  # noqa: E402
from bench.support.machine import free_port  # noqa: E402
from bench.support.queue import delivered_so_far, message, reset  # noqa: E402
from bench.support.sinks import start_any_sink  # noqa: E402
from layang.config import Config  # noqa: E402
from layang.db import database, is_postgresql, open_database  # noqa: E402
from layang.domain import accounts, webhooks  # noqa: E402
from layang.domain.intake import TransmissionRequest, accept_transmission  # noqa: E402
from layang.mail import outbox  # noqa: E402
from layang.migrations import upgrade  # noqa: E402

TABLES_TOO = ("webhook_attempt", "webhook_delivery", "webhook_event", "webhook_endpoint")


def events_posted(body: bytes) -> int:
    """What the webhook receiver counts of a POST: the events it carries."""
    return len(json.loads(body)["events"])


def fresh(config: Config, tmp: Path) -> None:
    if config.database_url.startswith("postgres"):
        database.execute_sql(f"TRUNCATE {', '.join(TABLES_TOO)} RESTART IDENTITY CASCADE")
    reset(config.database_url, tmp)


def intake_rate(config: Config, count: int, endpoint_url: str | None) -> float:
    """Messages accepted per second. On SQLite all in one transaction: the statements' cost,
    without each commit's wait for the disk, which would drown it. On PostgreSQL each on its
    own, as the API accepts them: the statements of one message then go as one round trip."""
    account = accounts.create_account(f"bench{time.monotonic_ns()}", live=True)
    if endpoint_url:
        webhooks.create_endpoint(account, endpoint_url, ["*"], "", config)
    together = database.atomic() if not is_postgresql() else contextlib.nullcontext()
    started = time.perf_counter()
    with together:
        for n in range(count):
            accept_transmission(account, TransmissionRequest(message(n)), config)
    return count / (time.perf_counter() - started)


def intake(config: Config, tmp: Path, count: int, receiver_url: str) -> dict[str, float]:
    """Intake rates (median of 3 interleaved rounds): without the webhook statements (the
    intake path before webhooks), as shipped with no endpoint, and with one endpoint."""
    shipped = outbox.injection_batches
    runs: dict[str, list[float]] = {"before webhooks": [], "no endpoint": [], "one endpoint": []}
    for _ in range(3):
        fresh(config, tmp)
        outbox.injection_batches = lambda *args: []
        try:
            runs["before webhooks"].append(intake_rate(config, count, None))
        finally:
            outbox.injection_batches = shipped
        fresh(config, tmp)
        runs["no endpoint"].append(intake_rate(config, count, None))
        fresh(config, tmp)
        runs["one endpoint"].append(intake_rate(config, count, receiver_url))
    return {label: statistics.median(rates) for label, rates in runs.items()}


def fill(config: Config, count: int, endpoint_url: str | None) -> None:
    account = accounts.create_account(f"bench{time.monotonic_ns()}", live=True)
    if endpoint_url:
        webhooks.create_endpoint(account, endpoint_url, ["*"], "", config)
    with database.atomic():
        for n in range(count):
            accept_transmission(account, TransmissionRequest(message(n)), config)


def worker_run(env: dict[str, str], count: int, receiver_port: int | None) -> dict[str, float]:
    """One worker on the filled queue: its mail rate and, with a receiver, the time until
    every event arrived."""
    metrics_port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "layang", "worker"],
        cwd=ROOT,
        env={**env, "LAYANG_WORKER_METRICS_BIND": f"127.0.0.1:{metrics_port}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.perf_counter()
    result: dict[str, float] = {}
    try:
        while delivered_so_far(metrics_port) == 0:
            if worker.poll() is not None:
                raise SystemExit("the worker exited")
            time.sleep(0.01)
        first = time.perf_counter()
        while delivered_so_far(metrics_port) < count:
            time.sleep(0.02)
        result["mail_rate"] = count / (time.perf_counter() - first)
        if receiver_port is not None:
            while counted(receiver_port) < 2 * count:
                if time.perf_counter() - started > 600:
                    raise SystemExit("webhooks did not all arrive within 10 minutes")
                time.sleep(0.05)
            result["event_rate"] = 2 * count / (time.perf_counter() - started)
            result["events_after_mail"] = time.perf_counter() - first - count / result["mail_rate"]
    finally:
        worker.terminate()
        worker.wait()
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--serve-receiver", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_receiver is not None:
        serve_counter(args.serve_receiver, events_posted)
        return

    tmp = Path(tempfile.mkdtemp(prefix="layang-webhooks-"))
    sink_port, receiver_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp),
        LAYANG_RELAY_URL=f"smtp://127.0.0.1:{sink_port}?tls=off",
        LAYANG_LOG_LEVEL="WARNING",
        LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
        LAYANG_WEBHOOK_ALLOW_PRIVATE="true",
    )
    if args.database_url:
        env["LAYANG_DATABASE_URL"] = args.database_url
    config = Config.from_env(env, dotenv=False)
    open_database(config.database_url)
    upgrade()
    backend = "PostgreSQL" if config.database_url.startswith("postgres") else "SQLite"
    receiver_url = f"http://127.0.0.1:{receiver_port}/hooks"

    sink, sink_name = start_any_sink(sink_port, "auto")
    receiver = start_counter(__file__, "--serve-receiver", receiver_port)
    try:
        count = args.count
        rates = intake(config, tmp, min(count, 2000), receiver_url)
        fresh(config, tmp)
        fill(config, count, None)
        plain = worker_run(env, count, None)
        fresh(config, tmp)
        fill(config, count, receiver_url)
        busy = worker_run(env, count, receiver_port)

        print(f"{count} text+html messages, {backend}, {sink_name}, one worker process")
        how = "one transaction each" if is_postgresql() else "one transaction for all"
        print(f"  intake ({how}), median of 3 rounds, msg/s:")
        base = rates["before webhooks"]
        for label, rate in rates.items():
            print(f"    {label:16} {rate:8.1f}   ratio to before: {rate / base:.2f}")
        print(f"  mail relay, no webhooks:            {plain['mail_rate']:8.1f} msg/s")
        print(f"  mail relay, webhooks busy:          {busy['mail_rate']:8.1f} msg/s")
        print(f"    ratio busy / none: {busy['mail_rate'] / plain['mail_rate']:.2f}")
        print(f"  webhook events delivered:           {busy['event_rate']:8.1f} events/s")
        print(
            f"    ratio events/s to the relay's msg/s (no webhooks): "
            f"{busy['event_rate'] / plain['mail_rate']:.2f}"
        )
        print(f"    last event arrived {busy['events_after_mail']:.2f} s after the last mail")
    finally:
        for process in (sink, receiver):
            process.terminate()
            process.wait()
        database.close()


if __name__ == "__main__":
    main()
