"""The SMTP client session against a real SMTP server: outcomes, replies, reused sessions."""

from __future__ import annotations

import asyncio

import pytest

from layang.delivery.smtp import Envelope, SmtpSession, Stale
from tests.upstream import Upstream

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
    """A session driven from a synchronous test, on an event loop of the test's thread."""

    def __init__(self, session: SmtpSession) -> None:
        self.session = session
        self.loop = asyncio.new_event_loop()

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def open(self) -> Client:
        self.run(self.session.open())
        return self

    def send(self, recipients, message=MESSAGE, **envelope):
        return self.run(
            self.session.send(Envelope(SENDER, tuple(recipients), message, **envelope))
        )

    def close(self) -> None:
        self.run(self.session.close())
        self.loop.close()


@pytest.fixture
def piped():
    with Upstream(pipelining=True) as server:
        yield server


@pytest.fixture
def clients():
    made = []

    def make(server, **settings):
        settings.setdefault("tls", "off")
        session = SmtpSession("127.0.0.1", server.port, helo_name="relay.test", **settings)
        client = Client(session).open()
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_a_421_on_a_reused_session_says_the_session_is_stale(piped, clients):
    client = clients(piped)
    assert client.send(["a@rcpt.test"])[0].outcome == "delivered"
    piped.script_mail("421 4.4.2 Idle too long")
    with pytest.raises(Stale):
        client.send(["b@rcpt.test"])
    assert client.session.closed
    assert [r.rcpt_tos for r in piped.received] == [["a@rcpt.test"]]


def test_a_421_slow_down_on_a_reused_session_is_the_sites_answer(piped, clients):
    client = clients(piped)
    client.send(["a@rcpt.test"])
    reply = "421 4.7.28 Our system has detected an unusual rate of unsolicited mail"
    piped.script_mail(reply)
    (result,) = client.send(["b@rcpt.test"])
    assert (result.code, result.outcome, result.reply) == (421, "deferred", reply)
    assert client.session.closed
