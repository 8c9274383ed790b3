"""Without a crash, every recipient is relayed exactly once, however slow the upstream and however
many workers run: counted as SMTP transactions at the upstream server.

The lease is kept short (1-2 s) and the upstream slower than it, so a worker that let a lease
lapse while waiting for a reply, or recorded an outcome late, would show a second transaction.
"""

from __future__ import annotations

import collections
import time

import pytest

from layang.models import Recipient
from tests.conftest import BACKENDS
from tests.delivery.test_crash import process_env, send_many, start, stop, wait_until

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def transactions(upstream) -> collections.Counter:
    """How many times each recipient's message reached the end of DATA upstream."""
    counts: collections.Counter = collections.Counter()
    for verb, argument in upstream.attempts:
        if verb == "RCPT":
            counts[argument.lower()] += 0  # seen, not necessarily sent
    for received in upstream.received:
        for address in received.rcpt_tos:
            counts[address.lower()] += 1
    return counts


def delivered() -> int:
    return Recipient.select().where(Recipient.status == "Delivery").count()


def run_workers(config, upstream, tmp_path, count, **settings):
    env = process_env(config, LAYANG_RELAY_URL=upstream.url, **settings)
    return [start(["worker"], env, tmp_path / f"w{n}.log") for n in range(count)]


def logs(tmp_path) -> str:
    return "\n".join(p.read_text() for p in sorted(tmp_path.glob("w*.log")))


def test_a_slow_upstream_gets_each_recipient_once_from_several_workers(
    client, auth, config, upstream, tmp_path
):
    send_many(client, auth, 30)
    upstream.slow_down(0.3)  # with a 1 s lease: a batch takes many leases to send
    workers = run_workers(config, upstream, tmp_path, 3, LAYANG_LEASE_SECONDS=1)
    try:
        wait_until(lambda: delivered() == 30, 60, f"delivered {delivered()}\n{logs(tmp_path)}")
    finally:
        for worker in workers:
            stop(worker)
    counts = transactions(upstream)
    assert len(counts) == 30
    assert set(counts.values()) == {1}, {a: n for a, n in counts.items() if n != 1}
    assert len(upstream.data_seen) == 30  # no transaction was even started twice


def test_a_hung_message_does_not_hold_back_the_rest_of_its_batch(
    client, auth, config, upstream, tmp_path
):
    # The stuck message is queued first, so one worker claims it with the others behind it.
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "stuck0",
            "to": [{"email": "stuck@rcpt.test"}],
            "bodyText": "hello",
        },
    )
    assert response.status_code == 200
    upstream.hang("stuck@rcpt.test")
    send_many(client, auth, 10, prefix="later")
    workers = run_workers(config, upstream, tmp_path, 2, LAYANG_LEASE_SECONDS=2)
    try:
        assert upstream.wait_stalled(15), logs(tmp_path)
        # The other ten arrive while the first is still waiting for its reply…
        started = time.monotonic()
        wait_until(lambda: delivered() == 10, 20, f"delivered {delivered()}\n{logs(tmp_path)}")
        assert time.monotonic() - started < 15
        # …and the stuck one is never taken over while its worker waits: well past the lease.
        time.sleep(3)
        stuck = [d for d in upstream.data_seen if b"Subject: stuck0" in d]
        assert len(stuck) == 1
        upstream.release()
        wait_until(lambda: delivered() == 11, 20, f"delivered {delivered()}\n{logs(tmp_path)}")
    finally:
        upstream.release()
        for worker in workers:
            stop(worker)
    subjects = collections.Counter(r.message["Subject"] for r in upstream.received)
    assert set(subjects.values()) == {1}, subjects
    assert len(upstream.data_seen) == 11


def test_a_mixed_upstream_fast_and_slow_gets_each_recipient_once(
    client, auth, config, upstream, tmp_path
):
    send_many(client, auth, 40)
    upstream.slow_down(1.5, *(f"r{n}@rcpt.test" for n in range(0, 40, 7)))
    workers = run_workers(config, upstream, tmp_path, 3, LAYANG_LEASE_SECONDS=1)
    try:
        wait_until(lambda: delivered() == 40, 60, f"delivered {delivered()}\n{logs(tmp_path)}")
    finally:
        for worker in workers:
            stop(worker)
    counts = transactions(upstream)
    assert set(counts.values()) == {1}, {a: n for a, n in counts.items() if n != 1}
    assert len(upstream.data_seen) == 40
