"""Several real ``layang worker`` processes on one PostgreSQL: exactly once normally, nothing
lost when a worker is killed (a database restart: ``test_restart.py``)."""

from __future__ import annotations

import signal
import time

from layang.models import Recipient
from tests.delivery.test_crash import (
    all_delivered,
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
    return sum(1 for line in path.read_text().splitlines() if " Delivery tid=" in line)


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
        # The default level has a line per delivery, which tells which worker sent it.
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
