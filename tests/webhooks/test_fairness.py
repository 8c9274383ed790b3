"""Fairness between endpoints and accounts (docs/api.md, "Webhooks"): one account's slow-loris
endpoints, answering one byte every 5 s, neither delay another account's events nor hold more than
two requests each, and every request ends within its overall deadline of 10 s."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace

import pytest

from layang.config import Config
from layang.domain import accounts
from layang.models import WebhookAttempt
from layang.webhooks.dispatcher import Dispatcher
from tests.conftest import BACKENDS
from tests.support.webhook_receiver import Receiver, SlowLoris
from tests.webhooks.test_dispatch import endpoint, send

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

SLOW_ENDPOINTS = 8


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, webhook_allow_private=True, worker_poll_seconds=0.1)


@pytest.fixture
def loris() -> Iterator[SlowLoris]:
    server = SlowLoris(interval=5.0)
    yield server
    server.stop()


def test_slow_endpoints_of_one_account_do_not_delay_another_accounts_events(
    client, auth, app, config, receiver: Receiver, loris: SlowLoris
):
    for n in range(SLOW_ENDPOINTS):
        endpoint(client, auth, loris.url(f"slow{n}"))
    # Enough events for several deliveries to each slow endpoint.
    send(client, auth, *[f"r{i}@rcpt.test" for i in range(250)])
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other, 'k')[1]}"}
    fast = endpoint(client, other_auth, receiver.url)

    dispatcher = Dispatcher(config, name="fair")
    stop = threading.Event()
    running = threading.Thread(target=dispatcher.run, args=(stop,))
    running.start()
    try:
        deadline = time.monotonic() + 30
        while loris.received < SLOW_ENDPOINTS and time.monotonic() < deadline:
            time.sleep(0.05)
        busy_at = time.monotonic()
        time.sleep(0.5)
        assert loris.received >= SLOW_ENDPOINTS  # the slow endpoints are busy now

        asked = time.monotonic()
        response = client.post(f"/v1/layang/webhooks/{fast['id']}/test", headers=other_auth)
        assert response.status_code == 202
        while not receiver.delivered() and time.monotonic() < asked + 30:
            time.sleep(0.01)
        delay = time.monotonic() - asked
        print(f"the other account's event arrived after {delay:.3f} s")
        assert receiver.delivered(), "the other account's event never arrived"
        assert delay < 2.0

        # The slow requests end at their overall deadline, though bytes keep coming.
        while WebhookAttempt.select().count() < 2 * SLOW_ENDPOINTS + 1:
            assert time.monotonic() < busy_at + 25, "the slow requests did not time out"
            time.sleep(0.1)
        timed_out = WebhookAttempt.select().where(WebhookAttempt.error.contains("timed out"))
        assert timed_out.count() >= 2 * SLOW_ENDPOINTS
        elapsed = time.monotonic() - busy_at
        print(f"the first slow requests were recorded {elapsed:.1f} s after they began")
        assert elapsed < 10 + 3
    finally:
        stop.set()
        running.join(30)
        assert not running.is_alive()
    assert loris.most_open and max(loris.most_open.values()) <= 2
