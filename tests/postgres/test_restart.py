"""A real ``layang serve`` and ``layang worker`` processes through a restart of PostgreSQL: the
tests' own throwaway server (``own_postgres``), the only one a test may stop."""

from __future__ import annotations

import time

import httpx
import pytest

from layang.models import Recipient
from tests.delivery.test_crash import (
    _healthy,
    all_delivered,
    free_port,
    process_env,
    start,
    stop,
    subjects,
    wait_until,
)
from tests.postgres.server import ADMIN_URL, OwnServer, query
from tests.postgres.test_scale import WORKERS, wait_started


@pytest.fixture
def postgres_url(own_postgres_url: str) -> str:
    return own_postgres_url


def started_at(url: str) -> object:
    return query(url, "SELECT pg_postmaster_start_time()")[0][0]


def post(http: httpx.Client, subject: str) -> httpx.Response:
    return http.post(
        "/v1/layang/transmissions",
        json={
            "from": {"email": "shop@sender.test"},
            "subject": subject,
            "to": [{"email": f"{subject}@rcpt.test"}],
            "bodyText": "hello",
        },
    )


def test_database_restart_loses_nothing_and_the_api_answers_503_meanwhile(
    config, api_key, upstream, own_postgres: OwnServer, tmp_path
):
    shared_since = started_at(ADMIN_URL)  # the server at LAYANG_TEST_POSTGRES_URL: not ours
    own_since = started_at(own_postgres.url)
    port = free_port()
    env = process_env(
        config,
        LAYANG_RELAY_URL=upstream.url,
        LAYANG_HTTP_BIND=f"127.0.0.1:{port}",
        LAYANG_HTTP_WORKERS=2,
        LAYANG_WORKER_BATCH_SIZE=10,
        LAYANG_LEASE_SECONDS=20,
    )
    api_log = tmp_path / "api.log"
    logs = [tmp_path / f"w{n}.log" for n in range(WORKERS)]
    processes = [start(["serve"], env, api_log)] + [start(["worker"], env, log) for log in logs]
    http = httpx.Client(
        base_url=f"http://127.0.0.1:{port}",
        headers={"Authorization": f"Bearer {api_key}"},
        timeout=10,
    )
    try:
        wait_until(lambda: _healthy(port), 30, "the API did not come up")
        wait_started(logs)
        upstream.stall()  # keep mail in flight and queued through the outage
        for n in range(100):
            assert post(http, f"before{n}").status_code == 200
        assert upstream.wait_stalled(10)

        own_postgres.stop()
        outage = [post(http, "lost") for _ in range(6)]
        outage += [http.get("/healthz"), http.get("/v1/layang/activity")]
        for response in outage:
            assert response.status_code == 503, response.text
            assert response.json() == {
                "error": "service_unavailable",
                "message": "The database is unavailable; try again shortly.",
                "status": 503,
            }
            assert response.headers["Retry-After"] == "5"
        metrics = http.get("/metrics")
        assert metrics.status_code == 200
        assert "layang_database_up 0.0" in metrics.text
        upstream.release()  # the sends in flight finish while nothing can be recorded
        time.sleep(1)
        own_postgres.start()

        # Nobody restarts anything: the API and the workers carry on by themselves.
        wait_until(lambda: _healthy(port), 30, "the API did not recover")
        for n in range(50):
            assert post(http, f"after{n}").status_code == 200
        wanted = {f"before{n}" for n in range(100)} | {f"after{n}" for n in range(50)}
        wait_until(
            lambda: wanted <= set(subjects(upstream)),
            60,
            f"missing upstream: {sorted(wanted - set(subjects(upstream)))[:10]}",
        )
        wait_until(all_delivered, 30, "not every email was recorded as delivered")
        assert all(p.poll() is None for p in processes), "a process died"
    finally:
        upstream.release()
        http.close()
        for process in processes:
            stop(process)
    got = subjects(upstream)
    assert "lost" not in got  # refused requests queued nothing
    assert max(got.values()) <= 2, got.most_common(5)
    assert Recipient.select().count() == 150
    api_output = api_log.read_text()
    assert "Traceback" not in api_output
    assert '" 500 ' not in api_output
    assert "database unavailable path=/v1/layang/transmissions" in api_output
    # The restart was of the tests' own server; the shared one kept running throughout.
    assert started_at(own_postgres.url) != own_since
    assert started_at(ADMIN_URL) == shared_since
