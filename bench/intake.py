"""HTTP intake rate: Layang under gunicorn against a bare Flask app doing the same work.

The baseline parses the same JSON, loads it with the same marshmallow schema and inserts one row
into a SQLite database with the same durability settings. Both run under gunicorn with the same
number of processes and are loaded by the same client processes, alternately, in one run: the
baseline with sync workers, Layang with the settings of `layang serve` (gunicorn.conf.py) and,
for comparison, with the sync workers it used before group commit. Two more variants price
this release's intake checks: a rate limit set too high to refuse anything (one counter upsert
per send) and an ``Idempotency-Key`` on every send (a claim, and the answer stored with the
message).

With ``--batch N`` it compares instead, on one Layang server, messages per second sent one per
request against messages sent ``N`` per ``POST /v1/layang/transmissions/batch`` (alternately,
in each round; docs/api.md, "Batch").

    python bench/intake.py [--seconds 8] [--rounds 3] [--clients 4] [--workers 2]
        [--database-url URL] [--variant 'LABEL=GUNICORN OPTIONS' ...] [--batch 500]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BODY = json.dumps(
    {
        "from": {"email": "shop@sender.example", "name": "Shop"},
        "subject": "Your order #1234 has shipped",
        "to": [{"email": "ana@rcpt.example", "name": "Ana"}],
        "cc": [],
        "bcc": [],
        "templateId": "",
        "metadata": {"order": "1234"},
        "bodyText": "Hello Ana,\n\nyour order has shipped.\n" * 10,
        "bodyHtml": "<html><body><p>Hello Ana,</p><p>your order has shipped.</p></body></html>" * 5,
    }
).encode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(port: int, path: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
            conn.request("GET", path)
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"server on port {port} did not come up")


def batch_body(size: int) -> bytes:
    """``size`` copies of the single send's message as one batch request's body."""
    return json.dumps({"messages": [json.loads(BODY)] * size}).encode()


def client_loop(
    port: int,
    headers: dict[str, str],
    seconds: float,
    counter,
    keyed: bool = False,
    batch: int = 0,
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    done = 0
    path, body = "/v1/layang/transmissions", BODY
    if batch:
        path, body = "/v1/layang/transmissions/batch", batch_body(batch)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if keyed:
            headers = {**headers, "Idempotency-Key": uuid.uuid4().hex}
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        answer = response.read()
        if response.status != 200:
            raise SystemExit(f"unexpected status {response.status}")
        if batch:
            results = json.loads(answer)["results"]
            if not all("transmissionId" in result for result in results):
                raise SystemExit(f"refused in a batch: {results[:2]}")
        done += batch or 1
    with counter.get_lock():
        counter.value += done


def measure(
    port: int, key: str, seconds: float, clients: int, keyed: bool = False, batch: int = 0
) -> float:
    """Messages accepted per second by ``clients`` processes in ``seconds``."""
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    counter = multiprocessing.Value("i", 0)
    procs = [
        multiprocessing.Process(
            target=client_loop, args=(port, headers, seconds, counter, keyed, batch)
        )
        for _ in range(clients)
    ]
    started = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return counter.value / (time.monotonic() - started)


def start_gunicorn(
    app: str, port: int, env: dict[str, str], log: Path, options: list[str]
) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "gunicorn", *options, "-b", f"127.0.0.1:{port}", app],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn processes, every server")
    parser.add_argument("--database-url", default="")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="LABEL=OPTIONS",
        help="also measure Layang with these gunicorn options on top of its own settings, "
        "e.g. 'gthread 1x8=-k gthread -w 1 --threads 8' (may be repeated)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        default=0,
        metavar="N",
        help="compare single sends with N-message batches on Layang alone",
    )
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="layang-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp),
        LAYANG_LOG_LEVEL="WARNING",
        LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
        LAYANG_HTTP_WORKERS=str(args.workers),
        PYTHONPATH=str(ROOT),
    )
    if args.database_url:
        env["LAYANG_DATABASE_URL"] = args.database_url
    baseline_env = {**env, "BASELINE_DB": str(tmp / "baseline.db")}
    if args.database_url:
        baseline_env["BASELINE_DB_URL"] = args.database_url

    def cli(*words: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "layang", *words],
            env=env,
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return json.loads(out)

    cli("accounts", "create", "bench", "--live")
    key = cli("keys", "create", "bench")["key"]
    if args.batch:
        compare_batches(args, env, tmp, key)
        return

    # Layang runs with the settings of `layang serve` (gunicorn.conf.py); the baseline and the
    # configuration Layang had before group commit run plain sync workers.
    sync = ["-k", "sync", "-w", str(args.workers)]
    layang_conf = ["-c", "gunicorn.conf.py"]
    servers: dict[str, tuple[str, dict[str, str], list[str]]] = {
        "baseline": ("bench.baseline_app:app", baseline_env, sync),
        "layang": ("wsgi:app", env, layang_conf),
        "layang, sync workers": ("wsgi:app", env, [*layang_conf, *sync, "--threads", "1"]),
        # A limit no benchmark reaches: the cost of counting, never a refusal.
        "layang, rate limit": (
            "wsgi:app",
            {**env, "LAYANG_RATE_LIMIT": "1000000000/h"},
            layang_conf,
        ),
        "layang, idempotency keys": ("wsgi:app", env, layang_conf),
    }
    keyed = {"layang, idempotency keys"}
    for variant in args.variant:
        label, _, options = variant.partition("=")
        servers[f"layang, {label}"] = ("wsgi:app", env, [*layang_conf, *options.split()])
    ports = {label: free_port() for label in servers}
    processes = []
    rates: dict[str, list[float]] = {label: [] for label in servers}
    try:
        for label, (app, server_env, options) in servers.items():
            log = tmp / f"{label.replace(' ', '_').replace(',', '')}.log"
            server_env = {**server_env, "LAYANG_HTTP_BIND": f"127.0.0.1:{ports[label]}"}
            processes.append(start_gunicorn(app, ports[label], server_env, log, options))
        for label in servers:
            wait_healthy(ports[label], "/healthz")
            # Warm-up: imports, first connections.
            measure(ports[label], key, 1, args.clients, label in keyed)
        for _ in range(args.rounds):
            for label in servers:
                rates[label].append(
                    measure(ports[label], key, args.seconds, args.clients, label in keyed)
                )
    finally:
        for process in processes:
            process.terminate()
            process.wait()

    backend = "postgresql" if args.database_url.startswith("postgres") else "sqlite"
    print(
        f"backend: {backend}, synchronous=FULL; {args.clients} client processes (keep-alive); "
        f"{args.rounds} rounds of {args.seconds:.0f}s; {args.workers} gunicorn processes each"
    )
    print(f"layang serves with: {describe_layang_settings(env)}")
    print("baseline: parse + marshmallow load + one insert, sync workers")
    # Each round measures every server back to back, so ratios within a round are the least
    # disturbed by load that comes and goes on a shared machine.
    baseline = rates["baseline"]
    for label, measured in rates.items():
        line = f"{label + ':':28} median {statistics.median(measured):8.1f} req/s"
        if label != "baseline":
            ratios = [lr / br for lr, br in zip(measured, baseline, strict=True)]
            line += (
                f"  per-round x baseline: {', '.join(f'{r:.2f}' for r in ratios)}"
                f"  median {statistics.median(ratios):.2f}x"
            )
        print(line)


def compare_batches(args: argparse.Namespace, env: dict[str, str], tmp: Path, key: str) -> None:
    """Messages per second through single sends and through ``args.batch``-message batches,
    alternately on one Layang server under gunicorn (its ``layang serve`` settings)."""
    port = free_port()
    server_env = {**env, "LAYANG_HTTP_BIND": f"127.0.0.1:{port}"}
    server = start_gunicorn(
        "wsgi:app", port, server_env, tmp / "batch.log", ["-c", "gunicorn.conf.py"]
    )
    single: list[float] = []
    batched: list[float] = []
    try:
        wait_healthy(port, "/healthz")
        measure(port, key, 1, args.clients)
        measure(port, key, 1, args.clients, batch=args.batch)
        for _ in range(args.rounds):
            single.append(measure(port, key, args.seconds, args.clients))
            batched.append(measure(port, key, args.seconds, args.clients, batch=args.batch))
    finally:
        server.terminate()
        server.wait()
    backend = "postgresql" if args.database_url.startswith("postgres") else "sqlite"
    print(
        f"backend: {backend}; {args.clients} client processes (keep-alive); {args.rounds} "
        f"rounds of {args.seconds:.0f}s; layang serves with: {describe_layang_settings(env)}"
    )
    ratios = [b / s for s, b in zip(single, batched, strict=True)]
    print(f"single sends:        median {statistics.median(single):8.1f} messages/s")
    print(
        f"batches of {args.batch:<4}:    median {statistics.median(batched):8.1f} messages/s"
        f"  per-round x single: {', '.join(f'{r:.1f}' for r in ratios)}"
        f"  median {statistics.median(ratios):.1f}x"
    )


def describe_layang_settings(env: dict[str, str]) -> str:
    """The worker class, processes and threads that gunicorn.conf.py gives Layang."""
    code = (
        "from layang.config import Config; from layang.serving.processes import gunicorn_settings;"
        "s = gunicorn_settings(Config.from_env());"
        "print(f\"{s['worker_class']} workers, {s['workers']} processes x "
        "{s.get('threads', 1)} threads\")"
    )
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


if __name__ == "__main__":
    main()
