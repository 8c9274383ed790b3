"""An idle `layang worker` on PostgreSQL does not poll: it sleeps on LISTEN and is woken at once
when mail is queued or a webhook event is stored, though its poll interval is a minute."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from layang.config import Config
from tests.delivery.test_crash import process_env, send_many, start, stop, wait_until
from tests.support.webhook_receiver import Receiver


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, webhook_allow_private=True)


def idle_worker(config, upstream, tmp_path):
    env = process_env(
        config,
        LAYANG_RELAY_URL=upstream.url,
        LAYANG_WORKER_POLL_SECONDS=60,
        LAYANG_WEBHOOK_ALLOW_PRIVATE="true",
        LAYANG_LOG_LEVEL="INFO",
    )
    log = tmp_path / "worker.log"
    worker = start(["worker", "--processes", "1"], env, log)
    wait_until(
        lambda: log.exists() and "dispatcher started" in log.read_text(),
        60,
        "the worker did not start",
    )
    # Both waits have begun: the safety interval (5 s) would be the next wake without a NOTIFY.
    time.sleep(1.5)
    return worker


def test_queued_mail_wakes_an_idle_worker_at_once(client, auth, config, upstream, tmp_path):
    worker = idle_worker(config, upstream, tmp_path)
    try:
        queued = time.monotonic()
        send_many(client, auth, 1)
        upstream.wait_for(1, timeout=30)
        assert time.monotonic() - queued < 2.5
    finally:
        stop(worker)


def test_a_stored_event_wakes_an_idle_dispatcher_at_once(
    client, auth, config, upstream, receiver: Receiver, tmp_path
):
    response = client.post(
        "/v1/layang/webhooks", headers=auth, json={"url": receiver.url, "events": ["Injection"]}
    )
    assert response.status_code == 201
    worker = idle_worker(config, upstream, tmp_path)
    try:
        queued = time.monotonic()
        send_many(client, auth, 1)
        receiver.wait_for_requests(1, timeout=30)
        # Events gather for up to GATHER_SECONDS before they go out together.
        assert time.monotonic() - queued < 3.0
    finally:
        stop(worker)
