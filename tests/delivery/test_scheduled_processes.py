"""Scheduled mail in real worker processes (CONTRACT section 23): held in the database only,
so a worker killed before the time loses nothing and the restarted one sends it; released within
a second of its time while thousands of others wait scheduled further ahead."""

from __future__ import annotations

import signal
import time
from datetime import UTC, datetime

import pytest

from layang.models import Event, Recipient, Transmission
from tests.conftest import BACKENDS
from tests.delivery.test_crash import process_env, start, stop, wait_while_running

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def schedule(client, auth, when_ms: int, to: list[str], subject: str) -> str:
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": "shop@sender.test",
            "subject": subject,
            "bodyText": "Hi",
            "to": to,
            "scheduledAt": iso(when_ms),
        },
    )
    assert response.status_code == 200, response.json
    return response.json["transmissionId"]


def test_a_killed_worker_loses_nothing_and_the_next_sends_on_time(
    client, auth, config, upstream, tmp_path
):
    now = int(time.time() * 1000)
    # Thousands wait scheduled weeks ahead: the due one is found by the index all the same.
    for batch in range(5):
        to = [f"later{batch}-{n}@rcpt.test" for n in range(1000)]
        schedule(client, auth, now + 20 * 86_400_000, to, f"later {batch}")
    due_at = now + 18_000  # room for a loaded machine to start and kill a worker first
    tid = schedule(client, auth, due_at, ["ana@rcpt.test", "budi@rcpt.test"], "On time")

    env = process_env(config, LAYANG_RELAY_URL=upstream.url, LAYANG_WORKER_POLL_SECONDS="0.5")
    log_path = tmp_path / "worker.log"
    first = start(["worker"], env, log_path)
    try:
        wait_while_running(lambda: "worker started" in log_path.read_text(), first, log_path,
                           "the first worker never started")  # fmt: skip
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        stop(first)
    assert time.time() * 1000 < due_at, "the machine was too slow to kill the worker in time"
    assert upstream.received == []
    second = start(["worker"], env, log_path)
    try:
        wait_while_running(lambda: log_path.read_text().count("worker started") >= 2, second,
                           log_path, "the second worker never started")  # fmt: skip
        started = time.time() * 1000
        wait_while_running(lambda: len(upstream.received) >= 2, second, log_path,
                           "the scheduled message never arrived")  # fmt: skip
    finally:
        stop(second)
    assert sorted(r.rcpt_tos[0] for r in upstream.received) == ["ana@rcpt.test", "budi@rcpt.test"]
    released = [
        e.created_at
        for e in Event.select()
        .join(Recipient)
        .where((Recipient.transmission == tid) & (Event.status == "Injection"))
    ]
    assert len(released) == 2
    assert all(0 <= at - due_at <= 1000 for at in released), (
        [at - due_at for at in released],
        started - due_at,
        log_path.read_text(),
    )
    waiting = Recipient.select().where(Recipient.status == "Scheduled").count()
    assert waiting == 5000
    assert Transmission.get_by_id(tid).scheduled_at == due_at
