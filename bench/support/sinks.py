"""Local SMTP sinks a benchmark sends to: Postfix's ``smtp-sink`` (C, so that the sink is not what
limits a sender) when installed, else the aiosmtpd sink of ``bench/smtp_sink.py``; and the raw
smtplib loop that is the floor of what any Python sender can do."""

from __future__ import annotations

import os
import shutil
import smtplib
import subprocess
import sys
import time
from pathlib import Path

from bench.support.machine import wait_port
from bench.support.queue import message
from layang.mail.compose import compose_message

ROOT = Path(__file__).resolve().parents[2]


def start_sink(port: int) -> subprocess.Popen:
    sink = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "smtp_sink.py"), str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert sink.stdout.readline().strip() == "ready"
    return sink


def start_any_sink(port: int, choice: str = "auto") -> tuple[subprocess.Popen, str]:
    """Postfix's smtp-sink if installed (and not ruled out), else the aiosmtpd sink; returns
    (process, name)."""
    binary = shutil.which("smtp-sink", path=f"{os.environ.get('PATH', '')}:/usr/sbin")
    if choice == "smtp-sink" and binary is None:
        raise SystemExit("smtp-sink is not installed (apt-get install postfix)")
    if binary is None or choice == "aiosmtpd":
        return start_sink(port), "aiosmtpd sink (bench/smtp_sink.py)"
    # smtp-sink drops privileges and insists on being told to whom when started as root.
    user = ["-u", "nobody"] if os.geteuid() == 0 else []
    sink = subprocess.Popen(
        [binary, *user, f"127.0.0.1:{port}", "256"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(port)
    return sink, "Postfix smtp-sink"


def raw_rate(port: int, count: int) -> float:
    messages = [compose_message(message(n), f"<raw{n}@sender.example>") for n in range(count)]
    started = time.perf_counter()
    with smtplib.SMTP("127.0.0.1", port, local_hostname="bench.local") as smtp:
        for n, data in enumerate(messages):
            smtp.sendmail("shop@sender.example", [f"r{n}@rcpt.example"], data)
    return count / (time.perf_counter() - started)
