"""Fixtures of the relay tests: relays closed after each test, and no thread left running."""

from __future__ import annotations

import threading

import pytest

from layang.delivery.relay import relay_from_url


@pytest.fixture
def no_threads_left_behind():
    """For the relay's tests: it runs no thread of its own, so any left after a test is a leak.
    (A worker's bookkeeper thread ends by itself shortly after its batch: not for those.)"""
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not left, left


@pytest.fixture
def relays():
    """Relays built by the test, closed at the end."""
    made = []

    def make(url, **kwargs):
        relay = relay_from_url(url, helo_name="relay.test", **kwargs)
        made.append(relay)
        return relay

    yield make
    for relay in made:
        relay.close()
