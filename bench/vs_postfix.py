"""Layang against Postfix: one `layang worker` and a private Postfix relay the same messages to
the same local upstream, in the same run, case after case; the ratios are paired per repetition.

    python bench/vs_postfix.py [--repeat 3] [--quick] [--cases 0ms,25ms,...] [--scale 1.0]
                               [--admin-url postgresql://user:password@127.0.0.1:5432/db]
                               [--zero-sink auto|smtp-sink|asyncio] [--queue-sizes 1000,10000,50000]
                               [--sessions N] [--no-chunking] [--sink-limit N]

The upstream is an asyncio SMTP sink (``bench/support/latency_sink.py``) whose every reply
leaves L ms after the command it answers arrived: pipelined commands do not add up, a stand-in
for a link's round trip that loopback lacks. It can also hold the reply to the end of DATA for
longer (a content scan). At 0 ms Postfix's own ``smtp-sink`` is used when installed (C, so that
the sink is not what limits either side). The sink counts a delivery per recipient of each
completed DATA and notes when the last one expected was answered.

Postfix: Debian's ``postfix`` package, installed here if missing (``apt-get``, non-interactive,
"No configuration": no system instance is set up or started). The instance is private: its own
config_directory, queue_directory and data_directory under a temp dir, smtpd on a free loopback
port for submission, ``relayhost`` the sink, default concurrency and everything else as shipped.
The messages are submitted over SMTP while a header check puts each on hold, then released with
``postsuper -H ALL`` (and ``postqueue -f``, which starts the deferred queue's scan instead of
waiting for ``queue_run_delay``); the drain is timed from the release to the sink's last delivery.

Layang: a throwaway PostgreSQL database made through ``--admin-url``; the same messages enqueued
through the domain's intake while no worker runs and held (due in the year 3000), then one
``layang worker`` started on the held queue and left to settle, the queue released (made due now,
with the NOTIFY an enqueue sends), and the drain timed from the release until the sink has them
all, as Postfix's is; then the worker is stopped. Whatever ``layang worker`` is (processes,
connections) is what is measured.

``--sessions N`` compares the two at equal session limits: Postfix's per-destination concurrency
(``default_destination_concurrency_limit``, ``smtp_destination_concurrency_limit`` and
``relay_destination_concurrency_limit``) is N, and so is Layang's: the smarthost URL says
``?sessions=N`` (the smarthost's session limit) when this Layang's URL parser knows the option,
and one ``layang worker --processes 1`` with ``LAYANG_WORKER_CONNECTIONS=N`` bounds it the same
either way. Without it each side runs as shipped (Postfix: 20 per destination; Layang: 200
sessions per process, one process per core).

CPU per 1,000 deliveries, both sides in the same run, from the release to the last delivery:
the CPU seconds (user + system, from /proc/PID/stat) of the side's own processes plus the
sink's process (Postfix: its master and every daemon under it; Layang: the worker's processes
and the PostgreSQL backends serving its database), and, as a second figure, the whole
machine's busy CPU (/proc/stat: others' work on a shared machine included).

``--no-chunking``: the latency sink offers PIPELINING only (it offers CHUNKING, RFC 3030, by
default, as Postfix ≥ 3.4, Gmail and Microsoft do). ``--sink-limit N``: the 0 ms sink is
``smtp-sink -m N``, a server that serves N sessions at once and leaves the rest in its listen
queue, as a process limit does.

Cases (each: Layang's rate over Postfix's in the same repetition):

- ``0ms``: replies at once (``smtp-sink``);
- ``25ms``, ``100ms``: every reply 25 / 100 ms after its command;
- ``25ms+300``: 25 ms per reply, 300 ms more after the end of DATA;
- ``25ms-10rcpt``: 25 ms, 10 recipients per message, Postfix with XVERP (one copy each);
- ``dkim``: Layang only, DKIM-signed over unsigned at 0 ms, from first to last delivery;
- ``idle``: Layang only, an idle worker's CPU (process and children, from /proc) over 30 s.

Then the queue-size curve: Layang's rate with 1,000 / 10,000 / 50,000 messages queued, at 0 ms,
over the deliveries from the 200th to the 1,000th (the worker's start-up left out).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's folder comes first on the path: keep it off, so that no bench
# script's name can stand for a package the code imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.support.latency_sink import (  # noqa: E402
    SMTP_SINK_SESSIONS,
    PostfixSink,
    Sink,
    run_sink,
)
from bench.support.layang_run import Layang  # noqa: E402
from bench.support.machine import cpu_by_process, cpu_used, free_port, machine_cpu  # noqa: E402
from bench.support.postfix import (  # noqa: E402
    SBIN,
    PrivatePostfix,
    composed,
    ensure_postfix,
    postfix_version,
)
from bench.support.queue import outgoing  # noqa: E402
from bench.support.repetitions import retrying, spread  # noqa: E402


@dataclass
class Case:
    name: str
    title: str
    latency_ms: float
    data_ms: float
    messages: int
    recipients: int = 1


CASES = [
    Case("0ms", "0 ms", 0, 0, 10000),
    Case("25ms", "25 ms per reply", 25, 0, 3000),
    Case("100ms", "100 ms per reply", 100, 0, 1000),
    Case("25ms+300", "25 ms + 300 ms after DATA", 25, 300, 1000),
    Case("25ms-10rcpt", "25 ms, 10 recipients/message (Postfix XVERP)", 25, 0, 300, 10),
]


def relay_url(port: int, sessions: int | None) -> str:
    """Layang's smarthost URL for the sink on ``port``. With ``sessions`` it carries
    ``?sessions=N``, the smarthost's session limit (CONTRACT section 19), when this Layang's
    URL parser knows the option (the worker's one process of N connections bounds it the same
    either way)."""
    from layang.delivery.smarthost import RelayConfigError, relay_from_url

    url = f"smtp://127.0.0.1:{port}?tls=off"
    if sessions is None:
        return url
    limited = f"{url}&sessions={sessions}"
    try:
        relay_from_url(limited)
    except RelayConfigError:
        return url
    return limited


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tenth of the messages, one repetition, a short curve",
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every case's message count"
    )
    parser.add_argument("--cases", default="0ms,25ms,100ms,25ms+300,25ms-10rcpt,dkim,idle")
    parser.add_argument("--queue-sizes", default="1000,10000,50000", help="empty: no curve")
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--zero-sink", choices=("auto", "smtp-sink", "asyncio"), default="auto")
    parser.add_argument(
        "--admin-url",
        default="postgresql://layang_ci:layang_ci@127.0.0.1:5432/layang_ci",
        help="a role that may create databases; a throwaway database is made and dropped",
    )
    parser.add_argument(
        "--sessions",
        type=int,
        help="session limit of each side: Postfix's destination concurrency, Layang's "
        "smarthost ?sessions=N with one worker process of N connections",
    )
    parser.add_argument(
        "--no-chunking", action="store_true", help="the latency sink offers no CHUNKING"
    )
    parser.add_argument(
        "--sink-limit",
        type=int,
        default=SMTP_SINK_SESSIONS,
        help="sessions the 0 ms smtp-sink serves at once (-m)",
    )
    parser.add_argument(
        "--layang-sessions",
        type=int,
        help="the smarthost's ?sessions=N for Layang alone, its default worker otherwise "
        "(400: the two processes of 200 connections the figures before it had, unlimited)",
    )
    parser.add_argument("--serve-sink", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sink:
        run_sink(args.serve_sink)
        return
    if args.sessions is not None and args.sessions < 1:
        raise SystemExit("--sessions: at least 1")
    if args.quick:
        args.scale, args.repeat = args.scale / 10, 1
        if args.queue_sizes == parser.get_default("queue_sizes"):
            args.queue_sizes = "1000,5000"
        args.idle_seconds = min(args.idle_seconds, 10)
    chosen = args.cases.split(",")
    unknown = set(chosen) - {c.name for c in CASES} - {"dkim", "idle"}
    if unknown:
        raise SystemExit(f"--cases: unknown {', '.join(sorted(unknown))}")
    cases = [c for c in CASES if c.name in chosen]
    sizes = [int(n) for n in args.queue_sizes.split(",") if n]
    ensure_postfix()

    base = Path(tempfile.mkdtemp(prefix="layang-vs-postfix-"))
    sink_port, zero_port = free_port(), free_port()
    use_smtp_sink = args.zero_sink == "smtp-sink" or (
        args.zero_sink == "auto" and Path(f"{SBIN}/smtp-sink").exists()
    )
    sink = Sink(sink_port, chunking=not args.no_chunking)
    zero_sink = PostfixSink(zero_port, args.sink_limit) if use_smtp_sink else sink
    postfix = PrivatePostfix(base / "postfix", sink_port, args.sessions)
    postfix_zero = (
        PrivatePostfix(base / "postfix-zero", zero_port, args.sessions)
        if use_smtp_sink
        else postfix
    )
    layang: Layang | None = None
    results: dict[str, dict[str, list[float]]] = {}
    notes: list[str] = []
    idle: float | None = None
    curve: list[tuple[int, float]] = []
    completed = False
    try:
        for instance in {id(postfix): postfix, id(postfix_zero): postfix_zero}.values():
            instance.start()
        layang = Layang(args.admin_url, base / "layang", sink_port)
        if args.sessions is not None:
            # Equal footing: N sessions at most, whether or not the URL's ?sessions= is known.
            layang.processes = 1
            layang.env["LAYANG_WORKER_CONNECTIONS"] = str(args.sessions)
        limit = args.sessions if args.sessions is not None else args.layang_sessions
        zero_env = {**layang.env, "LAYANG_RELAY_URL": relay_url(zero_port, limit)}
        sink_env = {**layang.env, "LAYANG_RELAY_URL": relay_url(sink_port, limit)}

        def run_case(case: Case, rep: int) -> dict[str, float]:
            count = max(int(case.messages * args.scale), 10)
            messages = [outgoing(n, case.recipients) for n in range(count)]
            expected = count * case.recipients
            upstream = zero_sink if case.latency_ms == 0 and case.data_ms == 0 else sink
            instance = postfix_zero if upstream is zero_sink else postfix
            layang.env = zero_env if upstream is zero_sink else sink_env
            upstream.set(case.latency_ms, case.data_ms)
            timings = {"expected": float(expected)}
            order = ("postfix", "layang") if rep % 2 == 0 else ("layang", "postfix")
            for side in order:
                if side == "postfix":
                    instance.submit(composed(messages), xverp=case.recipients > 1)
                    upstream.expect(expected)
                    sides = ([instance.master_pid()], [upstream.process.pid])
                    before, machine = cpu_by_process(*sides), machine_cpu()
                    started = time.monotonic()
                    instance.release()
                    drained = upstream.wait(3600)
                    timings["postfix_cpu"] = cpu_used(before, cpu_by_process(*sides))
                    timings["postfix_machine"] = machine_cpu() - machine
                    timings["postfix"] = drained.last - started
                    instance.wait_empty()
                else:
                    layang.fill(messages)
                    drained = layang.drain(upstream, expected)
                    timings["layang_machine"] = layang.machine
                    timings["layang_cpu"] = layang.cpu
                    timings["layang"] = drained.last - drained.started
                    timings["startup"] = drained.first - drained.started
                time.sleep(0.5)
                if (extra := upstream.count() - expected) > 0:
                    notes.append(f"{case.name} rep {rep + 1}: {side} delivered {extra} twice")
            return timings

        def run_dkim(count: int, rep: int) -> dict[bool, float]:
            layang.env = zero_env
            messages = [outgoing(n, 1) for n in range(count)]
            timings = {}
            for signed in (False, True) if rep % 2 == 0 else (True, False):
                layang.fill(messages, signed=signed)
                drained = layang.drain(zero_sink, count)
                # Both sides are Layang: the worker's start-up is left out of both.
                timings[signed] = drained.last - drained.first
            return timings

        def run_curve(size: int) -> float:
            layang.env = zero_env
            layang.fill([outgoing(n, 1) for n in range(size)])
            low, high = 200, min(1000, size)
            drained = layang.drain(zero_sink, high, (low, high))
            return (high - low) / (drained.marks[high] - drained.marks[low])

        if args.sessions is None:
            limits = "default settings"
        else:
            given = (
                "?sessions= in the URL"
                if "sessions=" in sink_env["LAYANG_RELAY_URL"]
                else ("?sessions= not known to this Layang's URL parser")
            )
            limits = (
                f"{args.sessions} sessions each (Postfix: destination concurrency; Layang: "
                f"1 process x {args.sessions} connections, {given})"
            )
        print(
            f"Layang: one `layang worker`, PostgreSQL; Postfix {postfix_version()}; {limits}; "
            f"relayhost the sink; {os.cpu_count()} cores; --repeat {args.repeat}; "
            f"0 ms sink: {zero_sink.name}, others: {sink.name}; database {layang.name}; "
            f"Layang's relay URL {sink_env['LAYANG_RELAY_URL']}",
            flush=True,
        )
        for rep in range(args.repeat):
            for case in cases:
                timings = retrying(
                    f"{case.name} rep {rep + 1}",
                    lambda case=case, rep=rep: run_case(case, rep),
                    notes,
                    args.admin_url,
                )
                row = results.setdefault(case.name, {})
                expected = timings["expected"]
                per_thousand = {
                    f"{side}_{kind}": timings[f"{side}_{kind}"] * 1000 / expected
                    for side in ("postfix", "layang")
                    for kind in ("cpu", "machine")
                }
                measured = {
                    "postfix": expected / timings["postfix"],
                    "layang": expected / timings["layang"],
                    "ratio": timings["postfix"] / timings["layang"],
                    **per_thousand,
                    "cpu_ratio": per_thousand["layang_cpu"] / per_thousand["postfix_cpu"],
                }
                for key, value in measured.items():
                    row.setdefault(key, []).append(value)
                print(
                    f"  rep {rep + 1} {case.title}: {expected:.0f} deliveries, Postfix "
                    f"{timings['postfix']:.2f} s, Layang {timings['layang']:.2f} s "
                    f"(first delivery {timings['startup']:.2f} s after the release), "
                    f"ratio {measured['ratio']:.3f}; CPU s per 1,000 (sides + sink): Postfix "
                    f"{per_thousand['postfix_cpu']:.2f}, Layang {per_thousand['layang_cpu']:.2f}"
                    f"; machine: Postfix {per_thousand['postfix_machine']:.2f}, Layang "
                    f"{per_thousand['layang_machine']:.2f}",
                    flush=True,
                )
            if "dkim" in chosen:
                count = max(int(3000 * args.scale), 10)
                timings = retrying(
                    f"dkim rep {rep + 1}",
                    lambda rep=rep, count=count: run_dkim(count, rep),
                    notes,
                    args.admin_url,
                )
                row = results.setdefault("dkim", {"unsigned": [], "signed": [], "ratio": []})
                row["unsigned"].append(count / timings[False])
                row["signed"].append(count / timings[True])
                row["ratio"].append(timings[False] / timings[True])
                print(
                    f"  rep {rep + 1} DKIM at 0 ms: {count} messages, unsigned "
                    f"{timings[False]:.2f} s, signed {timings[True]:.2f} s, "
                    f"ratio {timings[False] / timings[True]:.3f}",
                    flush=True,
                )
        if "idle" in chosen:
            layang.env = sink_env
            idle = retrying(
                "idle", lambda: layang.idle_cpu(args.idle_seconds), notes, args.admin_url
            )
            print(f"  idle worker: {idle:.2f} ms of CPU per second", flush=True)
        for size in sizes:
            curve.append(
                (
                    size,
                    retrying(
                        f"queue of {size}", lambda size=size: run_curve(size), notes, args.admin_url
                    ),
                )
            )
            print(f"  queue of {size}: {curve[-1][1]:.1f} msg/s", flush=True)
        completed = True
    finally:
        for instance in (postfix, postfix_zero):
            instance.stop()
        sink.stop()
        if zero_sink is not sink:
            zero_sink.stop()
        report(args, cases, results, idle, curve, notes)
        if layang is not None:
            layang.close()
        if completed:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"Logs (Postfix's maillog, the workers') kept in {base}")


def report(
    args: argparse.Namespace,
    cases: list[Case],
    results: dict[str, dict[str, list[float]]],
    idle: float | None,
    curve: list[tuple[int, float]],
    notes: list[str],
) -> None:
    """The table (whatever was measured, should a later part have failed)."""
    print()
    print(f"Median [min-max] of {args.repeat}; CPU: seconds per 1,000 deliveries of the side's")
    print("processes and the sink's (machine: the whole machine's busy CPU, /proc/stat).")
    print()
    print(
        "| case | Postfix msg/s | Layang msg/s | Layang / Postfix | Postfix CPU | Layang CPU "
        "| Layang / Postfix CPU | machine CPU Postfix | machine CPU Layang |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        if not (row := results.get(case.name)):
            continue
        print(
            f"| {case.title} | {spread(row['postfix'], 1)} | {spread(row['layang'], 1)} | "
            f"{spread(row['ratio'])} | {spread(row['postfix_cpu'])} | "
            f"{spread(row['layang_cpu'])} | {spread(row['cpu_ratio'])} | "
            f"{spread(row['postfix_machine'])} | {spread(row['layang_machine'])} |"
        )
    if "dkim" in results:
        row = results["dkim"]
        print(
            f"| DKIM-signed / unsigned at 0 ms (Layang only) | unsigned "
            f"{statistics.median(row['unsigned']):.1f} | signed "
            f"{statistics.median(row['signed']):.1f} | {spread(row['ratio'])} |"
        )
    if idle is not None:
        print(f"| idle worker CPU over {args.idle_seconds:.0f} s | | {idle:.2f} ms/s | |")
    if curve:
        print()
        print("Queue-size curve (one worker, 0 ms, deliveries 200 to 1,000):")
        for size, rate in curve:
            print(f"  {size:>6} queued: {rate:8.1f} msg/s")
    for note in notes:
        print("note:", note)


if __name__ == "__main__":
    main()
