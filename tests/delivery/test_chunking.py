"""CHUNKING (RFC 3030) where the server offers it with PIPELINING: MAIL, every RCPT and the
message as one ``BDAT <size> LAST`` chunk in one write, answered in one round trip."""

from __future__ import annotations

import pytest

from tests.delivery.conftest import MESSAGE

pytestmark = pytest.mark.usefixtures("no_threads_left_behind")


@pytest.fixture
def chunking(upstream):
    upstream.pipelining = True  # as every server offering CHUNKING does
    upstream.chunking = True
    return upstream


def outcomes(results):
    return [(r.recipient, r.code, r.outcome) for r in results]


def verbs(server):
    return [verb for verb, _ in server.attempts]


def test_the_message_goes_as_one_last_chunk_with_its_commands_in_one_write(chunking, clients):
    client = clients(chunking.url)
    reads_before = len(chunking.reads)
    results = client.send(["ana@rcpt.test", "bo@rcpt.test"])
    assert outcomes(results) == [
        ("ana@rcpt.test", 250, "delivered"),
        ("bo@rcpt.test", 250, "delivered"),
    ]
    (received,) = chunking.received
    # Raw bytes: the lines starting with a dot arrive as they were, nothing stuffed or added.
    assert received.data == MESSAGE
    assert received.rcpt_tos == ["ana@rcpt.test", "bo@rcpt.test"]
    assert ("BDAT", f"{len(MESSAGE)} LAST") in chunking.attempts
    written = b"".join(chunking.reads[reads_before:])
    assert written.startswith(
        b"MAIL FROM:<shop@sender.test> SIZE=%d\r\n"
        b"RCPT TO:<ana@rcpt.test>\r\nRCPT TO:<bo@rcpt.test>\r\n"
        b"BDAT %d LAST\r\n" % (len(MESSAGE), len(MESSAGE)) + MESSAGE
    )
    # One write: the commands and the chunk reached the server together.
    first = chunking.reads[reads_before]
    assert b"MAIL FROM" in first and b"BDAT" in first and first.endswith(MESSAGE)


def test_each_recipient_keeps_its_own_reply(chunking, clients):
    chunking.script_rcpt("later@rcpt.test", "451 4.3.0 Try again later")
    chunking.script_rcpt("gone@rcpt.test", "550 5.1.1 No such user")
    results = clients(chunking.url).send(["ok@rcpt.test", "later@rcpt.test", "gone@rcpt.test"])
    assert outcomes(results) == [
        ("ok@rcpt.test", 250, "delivered"),
        ("later@rcpt.test", 451, "deferred"),
        ("gone@rcpt.test", 550, "bounced"),
    ]
    assert chunking.received[0].rcpt_tos == ["ok@rcpt.test"]


def test_no_accepted_recipient_leaves_the_session_usable(chunking, clients):
    chunking.script_rcpt("a@rcpt.test", "550 5.1.1 unknown")
    client = clients(chunking.url)
    assert outcomes(client.send(["a@rcpt.test"])) == [("a@rcpt.test", 550, "bounced")]
    assert chunking.received == []
    assert outcomes(client.send(["b@rcpt.test"])) == [("b@rcpt.test", 250, "delivered")]
    assert chunking.connections == 1


def test_a_refused_sender_refuses_everyone_and_the_session_goes_on(chunking, clients):
    chunking.script_mail("553 5.7.1 Sender rejected")
    client = clients(chunking.url)
    results = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert outcomes(results) == [("a@rcpt.test", 553, "bounced"), ("b@rcpt.test", 553, "bounced")]
    assert {r.reply for r in results} == {"553 5.7.1 Sender rejected"}
    assert outcomes(client.send(["a@rcpt.test"])) == [("a@rcpt.test", 250, "delivered")]
    assert chunking.connections == 1


@pytest.mark.parametrize(
    ("reply", "code", "outcome"),
    [("451 4.3.0 Try later", 451, "deferred"), ("554 5.6.0 Message rejected", 554, "bounced")],
)
def test_the_last_chunks_reply_applies_to_every_accepted_recipient(
    chunking, clients, reply, code, outcome
):
    chunking.script_data(reply)
    client = clients(chunking.url)
    results = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert outcomes(results) == [("a@rcpt.test", code, outcome), ("b@rcpt.test", code, outcome)]
    assert results[0].reply == reply
    # The transaction was reset, and the session carries the next message.
    assert verbs(chunking)[-1] == "RSET"
    assert outcomes(client.send(["c@rcpt.test"])) == [("c@rcpt.test", 250, "delivered")]


def test_a_421_to_a_recipient_defers_everyone_and_drops_the_session(chunking, clients):
    chunking.script_rcpt("b@rcpt.test", "421 4.3.2 Shutting down")
    client = clients(chunking.url)
    results = client.send(["a@rcpt.test", "b@rcpt.test", "c@rcpt.test"])
    assert [r.outcome for r in results] == ["deferred"] * 3
    assert client.session.closed


def test_without_pipelining_the_body_goes_after_data(chunking, sessions):
    client = sessions(chunking.url, pipelining=False).open()
    assert outcomes(client.send(["a@rcpt.test"])) == [("a@rcpt.test", 250, "delivered")]
    assert "BDAT" not in verbs(chunking)
    assert chunking.received[0].data == MESSAGE
    client.close()
