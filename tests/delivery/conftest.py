"""Fixtures of the delivery tests: SMTP sessions driven from a test, no thread left running."""

from __future__ import annotations

import asyncio
import dataclasses
import threading

import pytest

from layang.delivery.envelope import Envelope
from layang.delivery.smarthost import relay_from_url
from layang.delivery.smtp import SmtpSession

MESSAGE = (
    b"From: Shop <shop@sender.test>\r\n"
    b"To: ana@rcpt.test\r\n"
    b"Subject: Your order\r\n"
    b"\r\n"
    b"Thanks.\r\n"
    b".a line starting with a dot\r\n"
    b".\r\n"
    b"The end.\r\n"
)
SENDER = "shop@sender.test"


class Client:
    """A session to the smarthost a relay URL names, driven from a synchronous test on an event
    loop of the test's own thread."""

    def __init__(self, session: SmtpSession) -> None:
        self.session = session
        self.loop = asyncio.new_event_loop()

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def open(self) -> Client:
        self.run(self.session.open())
        return self

    def send(self, recipients, message=MESSAGE, sender=SENDER, **envelope):
        return self.run(self.session.send(Envelope(sender, tuple(recipients), message, **envelope)))

    def close(self) -> None:
        if not self.loop.is_closed():
            self.run(self.session.close())
            self.loop.close()


@pytest.fixture
def no_threads_left_behind():
    """For the SMTP session's tests: it runs no thread of its own, so any left after a test is
    a leak. (A worker's bookkeeper thread ends by itself shortly after its batch: not for
    those.)"""
    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    assert not left, left


@pytest.fixture
def sessions():
    """``sessions(url, timeout=…, pipelining=…)``: a client of a session not opened yet to the
    smarthost ``url`` names (EHLO relay.test); ``clients`` opens it. Closed after the test."""
    made = []

    def make(url, *, pipelining=True, **options):
        smarthost = relay_from_url(url, helo_name="relay.test", **options)
        smarthost = dataclasses.replace(smarthost, pipelining=pipelining)
        client = Client(smarthost.session())
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def clients(sessions):
    return lambda url, **options: sessions(url, **options).open()
