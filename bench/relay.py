"""Relay rate: one `layang worker` process against a raw smtplib loop, to the same local sink.

For each queue size (default 5,000 and 50,000) a fresh database is filled with that many
text+HTML messages, then:

- the raw loop sends the same number of pre-built messages over one reused smtplib connection
  (no database, no composing: the floor of what any Python sender can do);
- one worker process (``layang worker --processes 1``: its metrics count every delivery, and
  its CPU is all in one process) claims, builds, sends and records them all, over as many
  sessions as it opens to the sink (``LAYANG_WORKER_CONNECTIONS``, 200 by default).

Printed: both rates and their ratio, the worker's rate for each successive 1,000 messages (flat
means no cost grows with the queue), and CPU time per message of the worker process, of the sink
and of the whole machine during the worker's run (the database's share is inside the worker on
SQLite; on PostgreSQL it is in the machine figure). The sink is Postfix's `smtp-sink` when
installed (Debian: `apt-get install postfix`; it offers PIPELINING), else an aiosmtpd sink.

    python bench/relay.py [--sizes 5000,50000] [--database-url URL] [--sink auto|smtp-sink|aiosmtpd]
                          [--suppressed N]

``--suppressed N`` first puts N other addresses on the account's suppression list, so that the
worker's check of every batch it claims looks up a list of that size (none of the queued
recipients is on it: the work relayed is the same).
"""

from __future__ import annotations

import argparse
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

from bench.support.machine import free_port, machine_cpu, process_cpu  # noqa: E402
from bench.support.queue import delivered_so_far, fill, reset  # noqa: E402
from bench.support.sinks import raw_rate, start_any_sink  # noqa: E402
from layang.config import Config  # noqa: E402
from layang.db import database, open_database  # noqa: E402
from layang.migrations import upgrade  # noqa: E402


def worker_run(env: dict[str, str], count: int, sink_pid: int) -> dict[str, object]:
    """Start one worker on the filled queue; its rate, per-1,000 rates and CPU use."""
    metrics_port = free_port()
    worker = subprocess.Popen(
        [sys.executable, "-m", "layang", "worker", "--processes", "1"],
        cwd=ROOT,
        env={**env, "LAYANG_WORKER_METRICS_BIND": f"127.0.0.1:{metrics_port}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    samples: list[tuple[float, int]] = []
    try:
        while delivered_so_far(metrics_port) == 0:
            if worker.poll() is not None:
                raise SystemExit("the worker exited")
            time.sleep(0.01)
        cpu_worker, cpu_sink = process_cpu(worker.pid), process_cpu(sink_pid)
        cpu_machine = machine_cpu()
        while True:
            done = delivered_so_far(metrics_port)
            samples.append((time.perf_counter(), done))
            if done >= count:
                break
            time.sleep(0.05)
        cpu_worker = process_cpu(worker.pid) - cpu_worker
        cpu_sink = process_cpu(sink_pid) - cpu_sink
        cpu_machine = machine_cpu() - cpu_machine
    finally:
        worker.terminate()
        worker.wait()
    (t0, n0), (t1, n1) = samples[0], samples[-1]
    return {
        "rate": (n1 - n0) / (t1 - t0),
        "per_thousand": per_thousand(samples),
        "cpu_ms": {
            "worker": cpu_worker * 1000 / (n1 - n0),
            "sink": cpu_sink * 1000 / (n1 - n0),
            "machine": cpu_machine * 1000 / (n1 - n0),
        },
    }


def per_thousand(samples: list[tuple[float, int]]) -> list[float]:
    """The rate over each successive 1,000 deliveries, from (time, delivered) samples."""
    rates = []
    mark, mark_time = samples[0][1], samples[0][0]
    for when, done in samples[1:]:
        while done >= mark + 1000:
            # The moment the count crossed mark + 1000, assuming a steady pace between samples.
            rates.append(1000 / max(when - mark_time, 1e-9))
            mark, mark_time = mark + 1000, when
    return rates


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="5000,50000")
    parser.add_argument("--database-url", default="")
    parser.add_argument("--sink", choices=("auto", "smtp-sink", "aiosmtpd"), default="auto")
    parser.add_argument("--suppressed", type=int, default=0)
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]

    tmp = Path(tempfile.mkdtemp(prefix="layang-relay-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp),
        LAYANG_RELAY_URL=f"smtp://127.0.0.1:{port}?tls=off",
        LAYANG_LOG_LEVEL="WARNING",
        LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
    )
    if args.database_url:
        env["LAYANG_DATABASE_URL"] = args.database_url
    config = Config.from_env(env, dotenv=False)
    open_database(config.database_url)
    upgrade()
    backend = "PostgreSQL" if config.database_url.startswith("postgres") else "SQLite"

    sink, sink_name = start_any_sink(port, args.sink)
    try:
        for size in sizes:
            reset(config.database_url, tmp)
            fill(config, size, args.suppressed)
            raw = raw_rate(port, size)
            run = worker_run(env, size, sink.pid)
            rates = run["per_thousand"]
            cpu = run["cpu_ms"]
            print(
                f"{size} queued text+html messages, {backend}, {sink_name}; the raw loop over one "
                "connection, one worker process over its own sessions"
            )
            if args.suppressed:
                print(f"  {args.suppressed} other addresses on the suppression list")
            print(f"  raw smtplib loop (pre-built bytes): {raw:8.1f} msg/s")
            print(f"  one layang worker:                  {run['rate']:8.1f} msg/s")
            print(f"  ratio worker/raw: {run['rate'] / raw:.2f}")
            if rates:
                third = max(len(rates) // 3, 1)
                print(
                    f"  per 1,000: first {rates[0]:.0f}, median {statistics.median(rates):.0f}, "
                    f"last {rates[-1]:.0f} msg/s; last third / first third: "
                    f"{statistics.mean(rates[-third:]) / statistics.mean(rates[:third]):.2f}"
                )
            print(
                f"  CPU per message: worker {cpu['worker']:.3f} ms, sink {cpu['sink']:.3f} ms, "
                f"whole machine {cpu['machine']:.3f} ms"
            )
    finally:
        sink.terminate()
        sink.wait()
        database.close()


if __name__ == "__main__":
    main()
