"""Where one `layang worker --processes 1` spends its time draining a queue to Postfix's
``smtp-sink`` (0 ms): cProfile in every thread of the worker (the engine's event loop runs in
a thread of its own, which ``python -m cProfile`` alone would not see).

    python bench/profile_worker.py [--messages 3000] [--top 30] [--timer wall|cpu]
                                   [--admin-url postgresql://user:password@127.0.0.1:5432/db]

Prints each busy thread's functions by own time, and keeps the ``.prof`` files (pstats).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))


def profiled_worker(out: str, timer: str) -> None:
    """``layang worker --processes 1`` in this process, every thread profiled into ``out``:
    by wall-clock time (``timer`` "wall", which counts waits for the GIL as the waiting
    function's time) or by the thread's CPU time ("cpu", slower to profile)."""
    import atexit
    import time

    clock = time.thread_time if timer == "cpu" else time.perf_counter

    profiles: list[tuple[str, cProfile.Profile]] = []
    original = threading.Thread.run

    def run(self: threading.Thread) -> None:
        profile = cProfile.Profile(clock)
        profiles.append((self.name, profile))
        profile.enable()
        try:
            original(self)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    main = cProfile.Profile(clock)
    profiles.append(("main", main))

    def dump() -> None:
        main.disable()
        for n, (name, profile) in enumerate(profiles):
            profile.dump_stats(os.path.join(out, f"{n:02d}-{name}.prof"))

    atexit.register(dump)
    from layang.cli.commands import main as cli

    main.enable()
    try:
        cli(["worker", "--processes", "1"], standalone_mode=False)
    finally:
        dump()
        atexit.unregister(dump)


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of ``pid``, by thread id."""
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = {}
    for task in sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name)):
        with contextlib.suppress(OSError):
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            cpu[int(task.name)] = (int(fields[11]) + int(fields[12])) / ticks
    return cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--admin-url", default="postgresql://layang_ci:layang_ci@127.0.0.1:5432/layang_ci"
    )
    parser.add_argument(
        "--plain", action="store_true", help="no profiler: the worker's rate and CPU per thread"
    )
    parser.add_argument("--processes", type=int, default=1, help="with --plain")
    parser.add_argument(
        "--timer",
        choices=("wall", "cpu"),
        default="wall",
        help="profile by wall-clock time, or by each thread's CPU time (the GIL's waits apart)",
    )
    parser.add_argument("--run-worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_worker:
        profiled_worker(args.run_worker, args.timer)
        return

    import subprocess
    import time

    from bench.support.latency_sink import PostfixSink
    from bench.support.layang_run import Layang
    from bench.support.machine import free_port
    from bench.support.postfix import ensure_postfix
    from bench.support.queue import outgoing

    ensure_postfix()
    base = Path(tempfile.mkdtemp(prefix="layang-profile-"))
    sink = PostfixSink(free_port())
    layang = Layang(args.admin_url, base / "layang", sink.port)
    out = base / "prof"
    out.mkdir()
    try:
        layang.env["LAYANG_RELAY_URL"] = f"smtp://127.0.0.1:{sink.port}?tls=off"
        layang.fill([outgoing(n, 1) for n in range(args.messages)])
        sink.expect(args.messages)
        started = time.monotonic()
        program = [sys.executable, __file__, "--run-worker", str(out), "--timer", args.timer]
        if args.plain:
            program = [sys.executable, "-m", "layang", "worker", "--processes", str(args.processes)]
        with open(base / "worker.log", "wb") as log:
            worker = subprocess.Popen(
                program,
                cwd=ROOT,
                env=layang.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            drained = sink.wait(3600, worker)
            threads = thread_cpu(worker.pid)
        finally:
            Layang.stop_worker(worker)
        print(
            f"{args.messages} messages in {drained.last - started:.2f} s from the worker's start "
            f"({args.messages / (drained.last - drained.first):.1f} msg/s after the first "
            f"delivery, {drained.first - started:.2f} s to the first)"
        )
        busy = sum(threads.values())
        print(
            f"worker CPU until the last delivery: {busy:.2f} s over {drained.last - started:.2f} s"
            f" ({busy / (drained.last - started):.0%} of one core); per thread (in the order"
            f" started): {', '.join(f'{cpu:.2f}' for cpu in threads.values())}"
        )
    finally:
        sink.stop()
        layang.close()
    for path in sorted(out.glob("*.prof")):
        stats = pstats.Stats(str(path))
        if stats.total_tt < 0.5:  # type: ignore[attr-defined]
            continue
        print(f"\n=== thread {path.stem}: {stats.total_tt:.2f} s profiled")  # type: ignore[attr-defined]
        stats.sort_stats("tottime").print_stats(args.top)
    print(f"profiles kept in {out}")


if __name__ == "__main__":
    main()
