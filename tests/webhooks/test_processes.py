"""Webhooks from real `layang worker` processes: a worker killed mid-request loses no event, and
two workers on PostgreSQL deliver each event once."""

from __future__ import annotations

import collections
import signal
from dataclasses import replace

import pytest

from layang.config import Config
from tests.delivery.test_crash import process_env, send_many, start, stop, wait_until
from tests.support.webhook_receiver import Receiver


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, webhook_allow_private=True)


def add_endpoint(client, auth, receiver: Receiver) -> dict:
    response = client.post(
        "/v1/layang/webhooks", headers=auth, json={"url": receiver.url, "events": ["*"]}
    )
    assert response.status_code == 201
    return response.json


def event_kinds(receiver: Receiver) -> collections.Counter:
    return collections.Counter((e["recipient"], e["type"]) for e in receiver.events())


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_worker_killed_mid_request_loses_no_event(
    client, auth, config, receiver: Receiver, tmp_path
):
    add_endpoint(client, auth, receiver)
    send_many(client, auth, 3)
    env = process_env(config, LAYANG_LEASE_SECONDS=2, LAYANG_WEBHOOK_ALLOW_PRIVATE="true")
    receiver.hang_seconds = 20
    receiver.script("hang")
    first = start(["worker"], env, tmp_path / "worker1.log")
    try:
        receiver.wait_for_requests(1, timeout=30)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        stop(first)
    (hung,) = receiver.requests
    assert receiver.delivered() == []

    second = start(["worker"], env, tmp_path / "worker2.log")
    try:
        expected = {
            (f"r{n}@rcpt.test", kind) for n in range(3) for kind in ("Injection", "Delivery")
        }
        wait_until(
            lambda: set(event_kinds(receiver)) == expected,
            30,
            f"events missing: {(tmp_path / 'worker2.log').read_text()}",
        )
    finally:
        stop(second)
    retried = receiver.delivered()[0]
    assert retried.headers["webhook-id"] == hung.headers["webhook-id"]
    assert retried.body == hung.body


@pytest.mark.parametrize("backend", ["postgresql"])
def test_two_workers_on_postgresql_deliver_each_event_once(
    client, auth, config, receiver: Receiver, tmp_path
):
    add_endpoint(client, auth, receiver)
    env = process_env(config, LAYANG_WEBHOOK_ALLOW_PRIVATE="true", LAYANG_WORKER_BATCH_SIZE=5)
    logs = [tmp_path / f"w{n}.log" for n in range(2)]
    workers = [start(["worker"], env, log) for log in logs]
    try:
        wait_until(
            lambda: all(log.exists() and "dispatcher started" in log.read_text() for log in logs),
            30,
            "the workers did not start",
        )
        send_many(client, auth, 40)
        wait_until(lambda: len(receiver.events()) >= 80, 60, "not every event arrived")
    finally:
        for worker in workers:
            stop(worker)
    counts = collections.Counter(e["id"] for e in receiver.events())
    assert len(counts) == 80 and set(counts.values()) == {1}
    assert set(event_kinds(receiver).values()) == {1}
    assert len(receiver.requests) == len(receiver.delivered())
