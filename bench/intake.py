"""HTTP intake rate: Layang under gunicorn against a bare Flask app doing the same work.

The baseline parses the same JSON, loads it with the same marshmallow schema and inserts one row
into a SQLite database with the same durability settings. Both run under gunicorn with the same
number of sync workers and are loaded by the same client processes, alternately, in one run.

    python bench/intake.py [--seconds 8] [--rounds 3] [--clients 4] [--database-url URL]
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


def client_loop(port: int, headers: dict[str, str], seconds: float, counter) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port)
    done = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        conn.request("POST", "/v1/layang/transmissions", body=BODY, headers=headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise SystemExit(f"unexpected status {response.status}")
        done += 1
    with counter.get_lock():
        counter.value += done


def measure(port: int, key: str, seconds: float, clients: int) -> float:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    counter = multiprocessing.Value("i", 0)
    procs = [
        multiprocessing.Process(target=client_loop, args=(port, headers, seconds, counter))
        for _ in range(clients)
    ]
    started = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return counter.value / (time.monotonic() - started)


def start_gunicorn(app: str, port: int, env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "-w",
            "2",
            "-k",
            "sync",
            "-b",
            f"127.0.0.1:{port}",
            app,
        ],
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
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="layang-bench-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp),
        LAYANG_LOG_LEVEL="WARNING",
        LAYANG_SECRET_KEY="bench",
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

    layang_port, baseline_port = free_port(), free_port()
    servers = [
        start_gunicorn("wsgi:app", layang_port, env, tmp / "layang.log"),
        start_gunicorn("bench.baseline_app:app", baseline_port, baseline_env, tmp / "baseline.log"),
    ]
    try:
        wait_healthy(layang_port, "/healthz")
        wait_healthy(baseline_port, "/healthz")
        measure(layang_port, key, 1, args.clients)  # warm-up: imports, first connections
        measure(baseline_port, key, 1, args.clients)
        layang_rates, baseline_rates = [], []
        for _ in range(args.rounds):
            baseline_rates.append(measure(baseline_port, key, args.seconds, args.clients))
            layang_rates.append(measure(layang_port, key, args.seconds, args.clients))
    finally:
        for server in servers:
            server.terminate()
            server.wait()
    layang, baseline = statistics.median(layang_rates), statistics.median(baseline_rates)
    backend = "postgresql" if args.database_url.startswith("postgres") else "sqlite"
    print(
        f"backend: {backend}; gunicorn 2 sync workers; {args.clients} client processes; "
        f"{args.rounds} rounds of {args.seconds:.0f}s, medians"
    )
    print(f"baseline (parse + marshmallow load + one insert): {baseline:8.1f} req/s")
    print(f"layang POST /v1/layang/transmissions:             {layang:8.1f} req/s")
    # Each round measures both back to back, so the ratio within a round is the least disturbed
    # by load that comes and goes on a shared machine.
    round_ratios = [lr / br for lr, br in zip(layang_rates, baseline_rates, strict=True)]
    print("per-round ratios: " + ", ".join(f"{r:.2f}" for r in round_ratios))
    print(
        f"ratio layang/baseline: {layang / baseline:.2f} (median of per-round ratios: "
        f"{statistics.median(round_ratios):.2f})"
    )


if __name__ == "__main__":
    main()
