"""This machine as the benchmarks see it: free loopback ports, and CPU time read from /proc."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) a running process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """CPU seconds the whole machine has been busy (all cores, not idle or waiting)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _stats() -> dict[int, list[str]]:
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
    return stats


def cpu_by_process(roots: list[int], singles: list[int] = ()) -> dict[int, float]:
    """CPU seconds (user + system) per process: every process of the trees under ``roots``
    (each root with its reaped children's too), and the processes ``singles`` alone."""
    stats = _stats()
    tree, grew = set(roots) & stats.keys(), True
    while grew:
        more = {pid for pid, fields in stats.items() if int(fields[1]) in tree} - tree
        tree |= more
        grew = bool(more)
    ticks: dict[int, int] = {}
    for pid in tree | (set(singles) & stats.keys()):
        fields = stats[pid]
        ticks[pid] = int(fields[11]) + int(fields[12])
        if pid in roots:
            ticks[pid] += int(fields[13]) + int(fields[14])
    return {pid: t / os.sysconf("SC_CLK_TCK") for pid, t in ticks.items()}


def cpu_used(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds used between two :func:`cpu_by_process` samples (a process that appeared
    meanwhile counts whole; one that exited unreaped by a root is lost)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())
