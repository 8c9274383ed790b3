"""One ``layang worker`` (its defaults: two processes of 200 connections, the smarthost's default
session limit) relaying a queue to Postfix's ``smtp-sink`` that serves at most N sessions at once
(``-m N``, as any server at its process limit), against the same sink with no such limit, in the
same run (CONTRACT section 19: at least 0.9x for N = 20, 100, 256).

    python bench/sink_limit.py [--messages 5000] [--limits 20,100,256] [--repeat 3]
                               [--admin-url postgresql://user:password@127.0.0.1:5432/db]

Prints, per limit, the rate after the first delivery (median [min-max] over the repetitions)
and its ratio to the unlimited sink's rate measured beside it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.support.latency_sink import SMTP_SINK_SESSIONS, PostfixSink  # noqa: E402
from bench.support.layang_run import Layang  # noqa: E402
from bench.support.machine import free_port  # noqa: E402
from bench.support.postfix import ensure_postfix  # noqa: E402
from bench.support.queue import outgoing  # noqa: E402


def one_run(admin_url: str, base: Path, messages: int, sessions: int) -> float:
    """Messages per second after the first delivery, one worker, a sink of ``sessions``."""
    sink = PostfixSink(free_port(), sessions)
    layang = Layang(admin_url, base, sink.port)
    try:
        layang.env["LAYANG_RELAY_URL"] = f"smtp://127.0.0.1:{sink.port}?tls=off"
        layang.fill([outgoing(n, 1) for n in range(messages)])
        sink.expect(messages)
        worker = layang.start_worker()
        try:
            drained = sink.wait(900, worker)
        finally:
            Layang.stop_worker(worker)
        return messages / max(drained.last - drained.first, 1e-6)
    finally:
        sink.stop()
        layang.close()


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--limits", default="20,100,256")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--admin-url", default="postgresql://layang_ci:layang_ci@127.0.0.1:5432/layang_ci"
    )
    args = parser.parse_args()
    ensure_postfix()
    limits = [int(n) for n in args.limits.split(",") if n]
    rates: dict[int, list[float]] = {n: [] for n in [SMTP_SINK_SESSIONS, *limits]}
    ratios: dict[int, list[float]] = {n: [] for n in limits}
    for _ in range(args.repeat):
        for limit in limits:
            # Each limited run is paired with an unlimited one just before it.
            with tempfile.TemporaryDirectory(prefix="layang-sink-limit-") as base:
                free = one_run(args.admin_url, Path(base) / "a", args.messages, SMTP_SINK_SESSIONS)
                time.sleep(1)
                limited = one_run(args.admin_url, Path(base) / "b", args.messages, limit)
            rates[SMTP_SINK_SESSIONS].append(free)
            rates[limit].append(limited)
            ratios[limit].append(limited / free)
            print(f"-m {limit}: {limited:,.0f} msg/s, unlimited {free:,.0f}", flush=True)
    print(f"\n{args.messages} messages, one `layang worker` with its defaults; median [min-max]")
    print(f"unlimited sink: {spread(rates[SMTP_SINK_SESSIONS])} msg/s")
    for limit in limits:
        values = ratios[limit]
        print(
            f"smtp-sink -m {limit}: {spread(rates[limit])} msg/s, ratio "
            f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"
        )


if __name__ == "__main__":
    main()
