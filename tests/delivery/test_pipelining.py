"""The SMTP client session against a real SMTP server offering PIPELINING (RFC 2920).

``Upstream.reads`` holds each chunk the server read from its socket: commands written together
arrive together, so the chunk holding MAIL shows what the session pipelined.
"""

from __future__ import annotations

import time

import pytest

from layang.delivery.envelope import Envelope
from layang.delivery.transports import Stale
from tests.delivery.conftest import MESSAGE
from tests.delivery.test_smtp import outcomes, verbs
from tests.support.upstream import Upstream, make_self_signed_cert, server_tls_context

pytestmark = pytest.mark.usefixtures("no_threads_left_behind")

SENDER = "shop@sender.test"


@pytest.fixture
def piped():
    """An upstream offering PIPELINING, without TLS or AUTH."""
    with Upstream(pipelining=True) as server:
        yield server


def envelope_writes(server):
    """The command lines of each chunk the server read that started a transaction."""
    return [
        chunk.decode().split("\r\n")[:-1] for chunk in server.reads if chunk.startswith(b"MAIL ")
    ]


def reads_per_transaction(server):
    """How many chunks the server read from each MAIL on (the session's writes, in effect)."""
    counts = []
    for chunk in server.reads:
        if chunk.startswith(b"MAIL "):
            counts.append(0)
        if counts:
            counts[-1] += 1
    return counts


def rcpts(count):
    return [f"r{n}@rcpt.test" for n in range(count)]


# -- the envelope in one write ---------------------------------------------------------------


def test_mail_rcpts_and_data_go_in_one_write(piped, clients):
    result = clients(piped.url).send(rcpts(5))
    assert outcomes(result) == [(r, 250, "delivered") for r in rcpts(5)]
    assert {r.reply for r in result} == {"250 2.0.0 OK queued"}
    (received,) = piped.received
    assert received.rcpt_tos == rcpts(5)
    assert received.data == MESSAGE  # dot-stuffed on the way, unstuffed by the server
    (lines,) = envelope_writes(piped)
    assert lines == [
        f"MAIL FROM:<{SENDER}> SIZE={len(MESSAGE)}",
        *(f"RCPT TO:<{r}>" for r in rcpts(5)),
        "DATA",
    ]
    assert reads_per_transaction(piped) == [2]  # the envelope, then the message


def test_without_pipelining_each_command_waits_for_its_reply(piped, clients):
    client = clients(piped.url, pipelining=False)
    client.send(rcpts(5))
    assert piped.wait_for(1)[0].rcpt_tos == rcpts(5)
    assert envelope_writes(piped) == [[f"MAIL FROM:<{SENDER}> SIZE={len(MESSAGE)}"]]
    assert reads_per_transaction(piped) == [8]  # MAIL, 5 RCPT, DATA, the message


def test_a_server_not_offering_pipelining_gets_one_command_at_a_time(upstream, clients):
    clients(upstream.url).send(rcpts(2))
    assert upstream.wait_for(1)[0].rcpt_tos == rcpts(2)
    assert reads_per_transaction(upstream) == [5]


def test_connection_is_reused_without_rset(piped, clients):
    client = clients(piped.url)
    for n in range(3):
        result = client.send([f"r{n}@rcpt.test", "x@rcpt.test"])
        assert [r.outcome for r in result] == ["delivered"] * 2
    assert piped.connections == 1
    assert verbs(piped, "RSET") == []
    assert reads_per_transaction(piped) == [2, 2, 2]


def test_many_recipients_are_written_in_bounded_groups(piped, clients):
    many = rcpts(250)
    piped.script_rcpt("r150@rcpt.test", "550 5.1.1 No such user")
    result = clients(piped.url).send(many)
    assert [r.code for r in result] == [250] * 150 + [550] + [250] * 99
    assert piped.received[0].rcpt_tos == [r for r in many if r != "r150@rcpt.test"]
    groups = [c.count(b"RCPT TO:") for c in piped.reads if b"RCPT TO:" in c]
    assert groups == [100, 100, 50]
    assert piped.reads[-4].startswith(b"MAIL FROM:")
    assert piped.reads[-2].endswith(b"DATA\r\n")


# -- per-recipient outcomes ------------------------------------------------------------------


def test_each_recipient_gets_its_own_rcpt_reply(piped, clients):
    piped.script_rcpt("r1@rcpt.test", "550 5.1.1 No such user")
    piped.script_rcpt("r3@rcpt.test", "451 4.3.0 Try again later")
    client = clients(piped.url)
    result = client.send(rcpts(5))
    assert outcomes(result) == [
        ("r0@rcpt.test", 250, "delivered"),
        ("r1@rcpt.test", 550, "bounced"),
        ("r2@rcpt.test", 250, "delivered"),
        ("r3@rcpt.test", 451, "deferred"),
        ("r4@rcpt.test", 250, "delivered"),
    ]
    assert result[1].reply == "550 5.1.1 No such user"
    assert result[3].reply == "451 4.3.0 Try again later"
    assert result[0].reply == "250 2.0.0 OK queued"
    assert piped.received[0].rcpt_tos == ["r0@rcpt.test", "r2@rcpt.test", "r4@rcpt.test"]
    assert len(envelope_writes(piped)) == 1
    # The replies were all consumed: the next transaction reads its own.
    assert client.send(["z@rcpt.test"])[0].code == 250
    assert piped.connections == 1


@pytest.mark.parametrize(
    "data_command",
    [
        None,  # aiosmtpd's own answer: 503 Error: need RCPT command
        "554 5.5.1 No valid recipients",
    ],
)
def test_all_rcpts_refused_and_data_refused(piped, clients, data_command):
    piped.script_rcpt("a@rcpt.test", "550 5.1.1 No such user")
    piped.script_rcpt("b@rcpt.test", "451 4.2.1 Mailbox busy")
    if data_command:
        piped.script_data_command(data_command)
    client = clients(piped.url)
    result = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert outcomes(result) == [("a@rcpt.test", 550, "bounced"), ("b@rcpt.test", 451, "deferred")]
    assert result[0].reply == "550 5.1.1 No such user"
    assert piped.data_seen == []
    assert piped.attempts[-1] == ("RSET", "")  # the refused DATA left the transaction open
    assert client.send(["a@rcpt.test"])[0].code == 250
    assert piped.connections == 1


def test_all_rcpts_refused_but_data_accepted_ends_with_a_lone_dot(piped, clients):
    piped.script_rcpt("a@rcpt.test", "550 5.1.1 No such user")
    piped.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
    piped.script_data_command("354 Go ahead")
    client = clients(piped.url)
    result = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert outcomes(result) == [("a@rcpt.test", 550, "bounced"), ("b@rcpt.test", 550, "bounced")]
    assert piped.data_seen == [b""]  # the message itself never went out
    assert piped.received == []
    assert verbs(piped, "RSET") == []  # the end of data closed the transaction
    assert client.send(["a@rcpt.test"])[0].code == 250
    assert piped.connections == 1


@pytest.mark.parametrize("pipelining", [True, False])
def test_refused_data_command_applies_to_the_accepted_and_resets(clients, pipelining):
    with Upstream(pipelining=pipelining) as server:
        server.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
        server.script_data_command("451 4.3.0 Not now")
        client = clients(server.url)
        result = client.send(["a@rcpt.test", "b@rcpt.test", "c@rcpt.test"])
        assert outcomes(result) == [
            ("a@rcpt.test", 451, "deferred"),
            ("b@rcpt.test", 550, "bounced"),
            ("c@rcpt.test", 451, "deferred"),
        ]
        assert result[0].reply == "451 4.3.0 Not now"
        assert server.data_seen == []
        assert server.attempts[-1] == ("RSET", "")
        # Without the RSET the next MAIL would be refused as nested.
        assert client.send(["a@rcpt.test"])[0].code == 250
        assert server.connections == 1


@pytest.mark.parametrize(
    ("reply", "code", "outcome"),
    [("451 4.7.1 Greylisted", 451, "deferred"), ("553 5.7.1 Sender rejected", 553, "bounced")],
)
def test_mail_refused_applies_to_everyone(piped, clients, reply, code, outcome):
    piped.script_mail(reply)
    client = clients(piped.url)
    result = client.send(rcpts(3))
    assert outcomes(result) == [(r, code, outcome) for r in rcpts(3)]
    assert {r.reply for r in result} == {reply}
    assert piped.data_seen == []
    # The RCPT and DATA replies that followed (503s) were read, so the session stays in step.
    result = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert outcomes(result) == [
        ("a@rcpt.test", 250, "delivered"),
        ("b@rcpt.test", 250, "delivered"),
    ]
    assert piped.received[0].rcpt_tos == ["a@rcpt.test", "b@rcpt.test"]
    assert piped.connections == 1


def test_421_at_mail_on_a_new_connection_defers_everyone(piped, clients):
    piped.script_mail("421 4.3.2 Shutting down")
    client = clients(piped.url)
    result = client.send(rcpts(2))
    assert [(r.code, r.outcome) for r in result] == [(421, "deferred")] * 2
    assert client.session.closed


def test_421_at_rcpt_defers_whoever_has_no_final_reply(piped, clients):
    piped.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
    piped.script_rcpt("c@rcpt.test", "421 4.3.2 Shutting down")
    client = clients(piped.url)
    rcpt = ["a@rcpt.test", "b@rcpt.test", "c@rcpt.test", "d@rcpt.test"]
    result = client.send(rcpt)
    assert outcomes(result) == [
        ("a@rcpt.test", 421, "deferred"),
        ("b@rcpt.test", 550, "bounced"),
        ("c@rcpt.test", 421, "deferred"),
        ("d@rcpt.test", 421, "deferred"),
    ]
    assert result[3].reply == "421 4.3.2 Shutting down"
    assert piped.received == []
    assert client.session.closed


def test_421_after_the_message_defers_the_accepted(piped, clients):
    piped.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
    piped.script_data("421 4.3.2 Shutting down")
    client = clients(piped.url)
    result = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert outcomes(result) == [("a@rcpt.test", 421, "deferred"), ("b@rcpt.test", 550, "bounced")]
    assert client.session.closed


def test_unsendable_recipients_are_not_written(piped, clients):
    client = clients(piped.url, timeout=2)
    result = client.send(["bad\r\n@rcpt.test", "ok@rcpt.test"])
    assert outcomes(result) == [
        ("bad\r\n@rcpt.test", 0, "bounced"),
        ("ok@rcpt.test", 250, "delivered"),
    ]
    assert envelope_writes(piped)[0][1:] == ["RCPT TO:<ok@rcpt.test>", "DATA"]
    result = client.send(["bad\n@rcpt.test"])
    assert outcomes(result) == [("bad\n@rcpt.test", 0, "bounced")]
    assert len(envelope_writes(piped)) == 1  # with nobody to send to, no transaction at all
    assert client.send(["ok@rcpt.test"])[0].code == 250
    assert piped.connections == 1


# -- the connection --------------------------------------------------------------------------


# A stale session is replaced by the engine: test_engine.py.


def test_a_dropped_idle_session_is_stale_before_anything_is_sent(piped, clients):
    client = clients(piped.url)
    client.send(["a@rcpt.test"])
    piped.kick()
    with pytest.raises(Stale):
        client.send(["b@rcpt.test", "c@rcpt.test"])
    assert [r.rcpt_tos for r in piped.received] == [["a@rcpt.test"]]


def test_a_session_to_a_restarted_server_is_stale(piped, clients):
    client = clients(piped.url)
    client.send(["a@rcpt.test"])
    piped.stop()
    piped.start()
    with pytest.raises(Stale):
        client.send(["b@rcpt.test", "c@rcpt.test"])
    assert client.session.closed


def test_timeout_waiting_for_the_final_reply_defers_the_accepted(piped, clients):
    piped.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
    client = clients(piped.url, timeout=0.3)
    piped.stall()
    result = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert piped.wait_stalled(1)
    piped.release()
    assert outcomes(result) == [("a@rcpt.test", 0, "deferred"), ("b@rcpt.test", 550, "bounced")]
    assert result[0].reply.startswith("timed out after 0.3s talking to 127.0.0.1:")
    assert client.session.closed


# -- options and TLS -------------------------------------------------------------------------


def test_smtputf8_8bitmime_and_size_are_still_declared(piped, clients):
    message = "Subject: Olá\r\n\r\nÇa marche, José.\r\n".encode()
    result = clients(piped.url).send(["josé@rcpt.test", "ana@rcpt.test"], message)
    assert [r.code for r in result] == [250, 250]
    (lines,) = envelope_writes(piped)
    assert lines == [
        f"MAIL FROM:<{SENDER}> SIZE={len(message)} BODY=8BITMIME SMTPUTF8",
        "RCPT TO:<josé@rcpt.test>",
        "RCPT TO:<ana@rcpt.test>",
        "DATA",
    ]
    (received,) = piped.received
    assert received.data == message
    assert received.rcpt_tos == ["josé@rcpt.test", "ana@rcpt.test"]


def test_pipelining_over_starttls(tmp_path, clients):
    certfile, keyfile = make_self_signed_cert(tmp_path / "tls")
    context = server_tls_context(certfile, keyfile)
    with Upstream(tls_context=context, cafile=certfile, pipelining=True) as server:
        client = clients(server.url)
        server.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
        result = client.send(["a@rcpt.test", "b@rcpt.test", "c@rcpt.test"])
        assert [r.code for r in result] == [250, 550, 250]
        received = server.wait_for(1)[0]
        assert received.tls is True
        assert received.rcpt_tos == ["a@rcpt.test", "c@rcpt.test"]
        assert received.data == MESSAGE
        assert envelope_writes(server)[0][1:] == [
            "RCPT TO:<a@rcpt.test>",
            "RCPT TO:<b@rcpt.test>",
            "RCPT TO:<c@rcpt.test>",
            "DATA",
        ]
        assert reads_per_transaction(server) == [2]


# -- transactions back to back: the next one begins behind the body's end ---------------------


def envelope(*recipients, message=MESSAGE):
    return Envelope(SENDER, tuple(recipients), message)


def test_the_next_transaction_goes_out_behind_the_body_in_the_same_write(piped, clients):
    client = clients(piped.url)
    first, second = envelope("a@rcpt.test"), envelope("b@rcpt.test", "c@rcpt.test")
    results = client.run(client.session.send(first, following=lambda: second))
    assert outcomes(results) == [("a@rcpt.test", 250, "delivered")]
    results = client.run(client.session.send(second))
    assert outcomes(results) == [
        ("b@rcpt.test", 250, "delivered"),
        ("c@rcpt.test", 250, "delivered"),
    ]
    assert [r.rcpt_tos for r in piped.received] == [["a@rcpt.test"], ["b@rcpt.test", "c@rcpt.test"]]
    assert [r.data for r in piped.received] == [MESSAGE, MESSAGE]
    # RFC 2920 section 3.1: the message content begins a group; the next MAIL, its RCPTs and
    # DATA come in the same write as the end of data, so each message costs one round trip.
    behind = [chunk for chunk in piped.reads if b"\r\n.\r\nMAIL FROM:" in chunk]
    assert len(behind) == 1
    assert behind[0].endswith(
        b"\r\n.\r\nMAIL FROM:<shop@sender.test> SIZE=%d\r\n"
        b"RCPT TO:<b@rcpt.test>\r\nRCPT TO:<c@rcpt.test>\r\nDATA\r\n" % len(MESSAGE)
    )
    # The session stays usable the usual way afterwards.
    assert outcomes(client.send(["d@rcpt.test"])) == [("d@rcpt.test", 250, "delivered")]
    assert piped.connections == 1


def test_no_following_envelope_means_no_commands_behind_the_body(piped, clients):
    client = clients(piped.url)
    client.run(client.session.send(envelope("a@rcpt.test"), following=lambda: None))
    assert outcomes(client.send(["b@rcpt.test"])) == [("b@rcpt.test", 250, "delivered")]
    assert not [chunk for chunk in piped.reads if b"\r\n.\r\nMAIL" in chunk]
    assert len(piped.received) == 2


@pytest.mark.parametrize(
    ("reply", "code", "outcome"),
    [("550 5.7.1 Sender refused", 550, "bounced"), ("451 4.3.0 Try later", 451, "deferred")],
)
def test_a_refused_pipelined_mail_settles_only_its_own_transaction(
    piped, clients, reply, code, outcome
):
    piped.script_mail("250 2.1.0 OK", reply)  # the second MAIL is the pipelined one
    client = clients(piped.url)
    second = envelope("b@rcpt.test")
    client.run(client.session.send(envelope("a@rcpt.test"), following=lambda: second))
    assert outcomes(client.run(client.session.send(second))) == [("b@rcpt.test", code, outcome)]
    assert outcomes(client.send(["c@rcpt.test"])) == [("c@rcpt.test", 250, "delivered")]
    assert [r.rcpt_tos for r in piped.received] == [["a@rcpt.test"], ["c@rcpt.test"]]


def test_a_closing_server_leaves_the_begun_transaction_stale(piped, clients):
    piped.script_data("421 4.3.2 Shutting down")
    client = clients(piped.url)
    second = envelope("b@rcpt.test")
    results = client.run(client.session.send(envelope("a@rcpt.test"), following=lambda: second))
    assert outcomes(results) == [("a@rcpt.test", 421, "deferred")]
    assert client.session.closed
    with pytest.raises(Stale):  # nothing of it reached the end of a message: a new session
        client.run(client.session.send(second))
    assert piped.received == []


def test_closing_while_a_transaction_waits_for_its_body_never_delivers_it(piped, clients):
    client = clients(piped.url)
    second = envelope("b@rcpt.test")
    client.run(client.session.send(envelope("a@rcpt.test"), following=lambda: second))
    client.run(client.session.close())
    assert client.session.closed
    # No QUIT (the server would read it as the body) and no end of data: the connection drops.
    piped.wait_for(1)
    time.sleep(0.2)
    assert [r.rcpt_tos for r in piped.received] == [["a@rcpt.test"]]
    assert "QUIT" not in [verb for verb, _ in piped.attempts]


def test_another_envelope_than_the_one_begun_is_refused_as_stale(piped, clients):
    client = clients(piped.url)
    begun = envelope("b@rcpt.test")
    client.run(client.session.send(envelope("a@rcpt.test"), following=lambda: begun))
    with pytest.raises(Stale):
        client.run(client.session.send(envelope("other@rcpt.test")))
    time.sleep(0.2)
    assert [r.rcpt_tos for r in piped.received] == [["a@rcpt.test"]]


def test_with_chunking_the_next_transaction_is_not_asked_for(piped, clients):
    piped.chunking = True  # one round trip a message already (BDAT LAST)
    client = clients(piped.url)
    asked = []
    client.run(client.session.send(envelope("a@rcpt.test"), following=lambda: asked.append(1)))
    assert asked == []
    assert len(piped.received) == 1


def test_without_pipelining_the_next_transaction_is_not_asked_for(upstream, clients):
    client = clients(upstream.url)
    asked = []
    client.run(client.session.send(envelope("a@rcpt.test"), following=lambda: asked.append(1)))
    assert asked == []
    assert len(upstream.received) == 1
