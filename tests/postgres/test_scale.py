"""Several real ``layang worker`` processes and a real ``layang serve`` on one PostgreSQL:
exactly once normally, nothing lost when a worker is killed or the database restarts."""

from __future__ import annotations

import signal
import time

import httpx

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

WORKERS = 3


def delivered() -> int:
    return Recipient.select().where(Recipient.status == "Delivery").count()


def deliveries_logged(path) -> int:
    return sum(1 for line in path.read_text().splitlines() if " delivery tid=" in line)


def wait_started(paths, timeout=30):
    wait_until(
        lambda: all(p.exists() and "worker started" in p.read_text() for p in paths),
        timeout,
        "the workers did not start: " + " | ".join(p.read_text() for p in paths if p.exists()),
    )


def test_three_workers_deliver_every_message_exactly_once(config, upstream, queue_many, tmp_path):
    env = process_env(
        config,
        LAYANG_RELAY_URL=upstream.url,
        LAYANG_WORKER_BATCH_SIZE=10,
        LAYANG_LOG_LEVEL="DEBUG",  # a line per delivery tells which worker sent it
    )
    logs = [tmp_path / f"w{n}.log" for n in range(WORKERS)]
    workers = [start(["worker"], env, log) for log in logs]
    try:
        wait_started(logs)
        queue_many(300)
        wait_until(all_delivered, 60, f"delivered {delivered()} of 300")
    finally:
        for worker in workers:
            stop(worker)
    got = subjects(upstream)
    assert set(got) == {f"m{n}" for n in range(300)}
    assert set(got.values()) == {1}, [s for s, n in got.items() if n > 1]
    shares = [deliveries_logged(log) for log in logs]
    assert sum(shares) == 300
    assert all(shares), shares  # every worker took part


def test_worker_killed_mid_run_loses_nothing(config, upstream, queue_many, tmp_path):
    env = process_env(
        config,
        LAYANG_RELAY_URL=upstream.url,
        LAYANG_WORKER_BATCH_SIZE=10,
        LAYANG_LEASE_SECONDS=2,
    )
    logs = [tmp_path / f"w{n}.log" for n in range(WORKERS)]
    workers = [start(["worker"], env, log) for log in logs]
    try:
        wait_started(logs)
        upstream.slow_down(0.02)  # about two seconds of sending: time to stall it midway
        queue_many(300)
        wait_until(lambda: delivered() >= 30, 30, "nothing was delivered")
        upstream.stall()  # every worker now waits on the upstream's answer to DATA
        assert upstream.wait_stalled(10)
        time.sleep(0.3)
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(10)
        held = Recipient.select().where(Recipient.next_attempt_at.is_null(False)).count()
        assert held > 0  # killed mid-run, with mail still to deliver
        upstream.release()
        wait_until(all_delivered, 60, f"delivered {delivered()} of 300")
    finally:
        upstream.release()
        for worker in workers:
            stop(worker)
    got = subjects(upstream)
    assert set(got) == {f"m{n}" for n in range(300)}  # every message, at least once
    # Only what the killed worker had in hand can have gone out twice.
    assert sum(n - 1 for n in got.values()) <= 10, got.most_common(5)


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
    config, api_key, upstream, cluster, tmp_path
):
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

        cluster.stop()
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
        cluster.start()

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
