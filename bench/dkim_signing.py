"""DKIM signing cost: one worker's relay rate with and without signing, in the same run.

Two accounts each queue the same text+HTML messages from ``shop@sender.example``; one of them
has ``sender.example`` verified with an active RSA-2048 key (set up directly in the database:
there is no DNS here). A worker in this process relays each account's queue in turn, to the
same local sink, alternating (unsigned, signed, unsigned, signed, …), and the rates' medians
give the ratio. Also printed: the cost of one signature, Layang's own signer (canonicalisation
and hashing in Python, the RSA step in OpenSSL through ``cryptography``, the key parsed once)
against dkimpy's (which parses the key in pure Python on every call).

    python bench/dkim_signing.py [--count 5000] [--rounds 3] [--database-url URL] [--sink auto|…]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's folder comes first on the path, and this file is named like dkimpy.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import dkim as dkimpy  # noqa: E402

from bench.support.machine import free_port  # noqa: E402
from bench.support.queue import message, reset  # noqa: E402
from bench.support.sinks import start_any_sink  # noqa: E402
from layang.config import Config  # noqa: E402
from layang.db import database, open_database  # noqa: E402
from layang.delivery.worker import Worker  # noqa: E402
from layang.domain import accounts  # noqa: E402
from layang.domain.intake import TransmissionRequest, accept_transmission  # noqa: E402
from layang.domain.sending_domains import create_domain  # noqa: E402
from layang.mail import dkim  # noqa: E402
from layang.mail.compose import compose_message  # noqa: E402
from layang.migrations import upgrade  # noqa: E402
from layang.models import DkimKey, Recipient, SendingDomain  # noqa: E402


def queue(config: Config, account: accounts.Account, count: int) -> None:
    with database.atomic():
        for n in range(count):
            accept_transmission(account, TransmissionRequest(message(n)), config)


def relay_all(config: Config) -> float:
    """Relay everything due with one worker; returns messages per second."""
    worker = Worker(config, name="bench")
    due = Recipient.select().where(Recipient.next_attempt_at.is_null(False)).count()
    stop = threading.Event()
    started = time.perf_counter()
    try:
        while worker.run_once(stop):
            pass
    finally:
        worker.close()
    return due / (time.perf_counter() - started)


def signature_cost(count: int = 300) -> tuple[float, float, float]:
    """Milliseconds per signature: Layang's signer with RSA-2048, dkimpy's own, and Layang's
    with Ed25519 (the optional second signature)."""
    pem, _ = dkim.generate_key()
    key = dkim.SigningKey.from_pem("sender.example", "bench", pem)
    raw = compose_message(message(0), "<bench@sender.example>")
    headers = dkim.header_list(raw)
    started = time.perf_counter()
    for _ in range(count):
        dkim.sign_message(raw, key)
    ours = (time.perf_counter() - started) / count * 1000
    ed_key = dkim.SigningKey.from_pem("sender.example", "bench2", dkim.generate_ed25519_key()[0])
    started = time.perf_counter()
    for _ in range(count):
        dkim.sign_message(raw, ed_key)
    ed25519 = (time.perf_counter() - started) / count * 1000
    started = time.perf_counter()
    for _ in range(count // 10):
        dkimpy.sign(
            raw,
            b"bench",
            b"sender.example",
            pem,
            canonicalize=(b"relaxed", b"relaxed"),
            include_headers=headers,
        )
    theirs = (time.perf_counter() - started) / (count // 10) * 1000
    return ours, theirs, ed25519


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--sink", choices=("auto", "smtp-sink", "aiosmtpd"), default="auto")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="layang-dkim-"))
    port = free_port()
    env = {
        "LAYANG_DATA_DIR": str(tmp),
        "LAYANG_RELAY_URL": f"smtp://127.0.0.1:{port}?tls=off",
        "LAYANG_SECRET_KEY": "bench-secret-key-never-used-in-production",
        "LAYANG_LOG_LEVEL": "WARNING",
    }
    if args.database_url:
        env["LAYANG_DATABASE_URL"] = args.database_url
    config = Config.from_env(env, dotenv=False)
    open_database(config.database_url)
    upgrade()
    reset(config.database_url, tmp)
    for table in (DkimKey, SendingDomain):
        table.delete().execute()
    backend = "PostgreSQL" if config.database_url.startswith("postgres") else "SQLite"

    plain = accounts.create_account("bench-plain", live=True)
    signing = accounts.create_account("bench-signing", live=True)
    create_domain(signing, "sender.example", None, config)
    SendingDomain.update(status="verified").execute()
    DkimKey.update(status="active").execute()

    sink, sink_name = start_any_sink(port, args.sink)
    rates: dict[str, list[float]] = {"unsigned": [], "signed": []}
    try:
        for _ in range(args.rounds):
            for label, account in (("unsigned", plain), ("signed", signing)):
                queue(config, account, args.count)
                rates[label].append(relay_all(config))
    finally:
        sink.terminate()
        sink.wait()
        database.close()

    ours, theirs, ed25519 = signature_cost()
    unsigned, signed = (statistics.median(rates[k]) for k in ("unsigned", "signed"))
    print(f"{args.count} text+html messages per run, {args.rounds} rounds, {backend}, {sink_name}")
    print(f"  one worker, unsigned: {unsigned:8.1f} msg/s  (runs: {json.dumps(rates['unsigned'])})")
    print(f"  one worker, signed:   {signed:8.1f} msg/s  (runs: {json.dumps(rates['signed'])})")
    print(f"  ratio signed/unsigned: {signed / unsigned:.3f}")
    print(f"  relay time added per message: {(1 / signed - 1 / unsigned) * 1000:.3f} ms")
    print(f"  one signature: {ours:.3f} ms (dkimpy's: {theirs:.3f} ms)")
    print(f"  one Ed25519 signature: {ed25519:.3f} ms ({ed25519 / ours:.3f} of RSA-2048)")


if __name__ == "__main__":
    main()
