"""The commands as separate processes on PostgreSQL: gunicorn's fork model, the schema commands,
the worker's own metrics endpoint and JSON logs."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx

from tests.delivery.test_crash import (
    ROOT,
    _healthy,
    all_delivered,
    free_port,
    process_env,
    start,
    stop,
    wait_until,
)
from tests.postgres.server import query, reset_schema
from tests.test_migrations import process_env as migration_env


def layang(env, *args):
    done = subprocess.run(
        [sys.executable, "-m", "layang", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout) if done.stdout.strip() else None


def test_every_command_runs_unchanged_on_a_fresh_database(config, tmp_path):
    reset_schema(config.database_url)
    env = process_env(config)
    # Several processes starting at once on an empty database all get the schema made once.
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: layang(env, "db", "upgrade"), range(4)))
    applied = [version for result in results for version in result["applied"]]
    assert sorted(applied) == sorted(set(applied)) and applied
    assert layang(env, "db", "upgrade") == {"applied": []}
    assert layang(env, "accounts", "create", "shop", "--live")["mode"] == "live"
    key = layang(env, "keys", "create", "shop", "--label", "ci")
    assert [k["id"] for k in layang(env, "keys", "list", "shop")] == [key["id"]]
    assert layang(env, "keys", "revoke", key["id"])["revokedAt"]
    columns = dict(
        query(
            config.database_url,
            "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema()",
        )
    )
    assert columns["transmission.raw"] == "bytea"
    assert columns["recipient.created_at"] == "bigint"


def test_gunicorn_workers_never_share_a_connection_even_with_preload(config, api_key, tmp_path):
    port = free_port()
    env = process_env(
        config,
        LAYANG_HTTP_BIND=f"127.0.0.1:{port}",
        LAYANG_HTTP_WORKERS=3,
        LAYANG_HTTP_THREADS=2,
    )
    log_path = tmp_path / "gunicorn.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "--preload", "wsgi:app"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _healthy(port), 30, log_path.read_text())

        def send(n):
            return httpx.post(
                f"http://127.0.0.1:{port}/v1/layang/transmissions",
                headers={"Authorization": f"Bearer {api_key}"},
                json={
                    "from": {"email": "shop@sender.test"},
                    "subject": f"s{n}",
                    "to": [{"email": "ana@rcpt.test"}],
                    "bodyText": "t",
                },
                timeout=10,
            ).status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(send, range(60)))
        assert statuses == [200] * 60, log_path.read_text()
        sessions = query(
            config.database_url,
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name = ''",
        )[0][0]
        # One per request thread of each worker process that served something (the master
        # keeps none); the test process's own connection is the one extra.
        assert sessions <= 3 * 2 + 1, sessions
    finally:
        stop(server)
    assert "Traceback" not in log_path.read_text()


def test_worker_exposes_its_relay_latency_and_logs_json(config, upstream, queue_many, tmp_path):
    port = free_port()
    env = process_env(
        config,
        LAYANG_RELAY_URL=upstream.url,
        LAYANG_WORKER_METRICS_BIND=f"127.0.0.1:{port}",
        LAYANG_LOG_FORMAT="json",
        LAYANG_LOG_LEVEL="DEBUG",
    )
    queue_many(5)
    log_path = tmp_path / "worker.log"
    # The first process serves the metrics of its own deliveries: one process sends them all.
    worker = start(["worker", "--processes", "1"], env, log_path)
    try:
        wait_until(all_delivered, 30, log_path.read_text())
        wait_until(lambda: "layang_relay_latency_seconds_count 5.0" in _get(port), 10, _get(port))
        wait_until(
            lambda: 'layang_worker_outcomes_total{status="Delivery"} 5.0' in _get(port),
            10,
            _get(port),
        )
    finally:
        stop(worker)
    entries = [json.loads(line) for line in log_path.read_text().splitlines()]
    # One line per outcome (docs/deploy.md, "Logs"), its fields parsed into the JSON entry.
    deliveries = [e for e in entries if e["message"].startswith("Delivery ")]
    assert len(deliveries) == 5, entries[-10:]
    assert all(e["level"] == "INFO" and e["logger"] == "layang.outcomes" for e in deliveries)
    assert all(e["tid"] and e["rid"] and str(e["code"]) == "250" for e in deliveries), deliveries


def _get(port: int) -> str:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
    except httpx.HTTPError as error:
        return str(error)


def test_serve_starts_and_answers_503_while_postgresql_is_unreachable(tmp_path):
    port = free_port()
    nothing_listens = f"postgresql://layang@127.0.0.1:{free_port()}/layang"
    env = migration_env(
        tmp_path, nothing_listens, LAYANG_HTTP_BIND=f"127.0.0.1:{port}", LAYANG_HTTP_WORKERS=2
    )
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "layang", "serve"],
            env=env,
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _status(port) == 503, 30, log_path.read_text())
        assert server.poll() is None
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    assert "database unavailable at start" in log_path.read_text()


def _status(port: int) -> int | None:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code
    except httpx.HTTPError:
        return None
