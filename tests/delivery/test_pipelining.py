"""The relay against a real SMTP server offering PIPELINING (RFC 2920).

``Upstream.reads`` holds each chunk the server read from its socket: commands written together
arrive together, so the chunk holding MAIL shows what the relay pipelined.
"""

from __future__ import annotations

import pytest

from tests.delivery.test_relay import MESSAGE, outcomes, verbs
from tests.upstream import Upstream, make_self_signed_cert, server_tls_context

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
    """How many chunks the server read from each MAIL on (the relay's writes, in effect)."""
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


def test_mail_rcpts_and_data_go_in_one_write(piped, relays):
    result = relays(piped.url).send(SENDER, rcpts(5), MESSAGE)
    assert outcomes(result) == [(r, 250, "delivered") for r in rcpts(5)]
    assert {r.reply for r in result.recipients} == {"250 2.0.0 OK queued"}
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


def test_without_pipelining_each_command_waits_for_its_reply(piped, relays):
    relay = relays(piped.url)
    relay.pipelining = False
    relay.send(SENDER, rcpts(5), MESSAGE)
    assert piped.wait_for(1)[0].rcpt_tos == rcpts(5)
    assert envelope_writes(piped) == [[f"MAIL FROM:<{SENDER}> SIZE={len(MESSAGE)}"]]
    assert reads_per_transaction(piped) == [8]  # MAIL, 5 RCPT, DATA, the message


def test_a_server_not_offering_pipelining_gets_one_command_at_a_time(upstream, relays):
    relays(upstream.url).send(SENDER, rcpts(2), MESSAGE)
    assert upstream.wait_for(1)[0].rcpt_tos == rcpts(2)
    assert reads_per_transaction(upstream) == [5]


def test_connection_is_reused_without_rset(piped, relays):
    relay = relays(piped.url)
    for n in range(3):
        result = relay.send(SENDER, [f"r{n}@rcpt.test", "x@rcpt.test"], MESSAGE)
        assert [r.outcome for r in result.recipients] == ["delivered"] * 2
    assert piped.connections == 1
    assert verbs(piped, "RSET") == []
    assert reads_per_transaction(piped) == [2, 2, 2]


def test_many_recipients_are_written_in_bounded_groups(piped, relays):
    many = rcpts(250)
    piped.script_rcpt("r150@rcpt.test", "550 5.1.1 No such user")
    result = relays(piped.url).send(SENDER, many, MESSAGE)
    assert [r.code for r in result.recipients] == [250] * 150 + [550] + [250] * 99
    assert piped.received[0].rcpt_tos == [r for r in many if r != "r150@rcpt.test"]
    groups = [c.count(b"RCPT TO:") for c in piped.reads if b"RCPT TO:" in c]
    assert groups == [100, 100, 50]
    assert piped.reads[-4].startswith(b"MAIL FROM:")
    assert piped.reads[-2].endswith(b"DATA\r\n")


# -- per-recipient outcomes ------------------------------------------------------------------


def test_each_recipient_gets_its_own_rcpt_reply(piped, relays):
    piped.script_rcpt("r1@rcpt.test", "550 5.1.1 No such user")
    piped.script_rcpt("r3@rcpt.test", "451 4.3.0 Try again later")
    relay = relays(piped.url)
    result = relay.send(SENDER, rcpts(5), MESSAGE)
    assert outcomes(result) == [
        ("r0@rcpt.test", 250, "delivered"),
        ("r1@rcpt.test", 550, "bounced"),
        ("r2@rcpt.test", 250, "delivered"),
        ("r3@rcpt.test", 451, "deferred"),
        ("r4@rcpt.test", 250, "delivered"),
    ]
    by = result.by_recipient()
    assert by["r1@rcpt.test"].reply == "550 5.1.1 No such user"
    assert by["r3@rcpt.test"].reply == "451 4.3.0 Try again later"
    assert by["r0@rcpt.test"].reply == "250 2.0.0 OK queued"
    assert piped.received[0].rcpt_tos == ["r0@rcpt.test", "r2@rcpt.test", "r4@rcpt.test"]
    assert len(envelope_writes(piped)) == 1
    # The replies were all consumed: the next transaction reads its own.
    assert relay.send(SENDER, ["z@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert piped.connections == 1


@pytest.mark.parametrize(
    "data_command",
    [
        None,  # aiosmtpd's own answer: 503 Error: need RCPT command
        "554 5.5.1 No valid recipients",
    ],
)
def test_all_rcpts_refused_and_data_refused(piped, relays, data_command):
    piped.script_rcpt("a@rcpt.test", "550 5.1.1 No such user")
    piped.script_rcpt("b@rcpt.test", "451 4.2.1 Mailbox busy")
    if data_command:
        piped.script_data_command(data_command)
    relay = relays(piped.url)
    result = relay.send(SENDER, ["a@rcpt.test", "b@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("a@rcpt.test", 550, "bounced"), ("b@rcpt.test", 451, "deferred")]
    assert result.recipients[0].reply == "550 5.1.1 No such user"
    assert piped.data_seen == []
    assert piped.attempts[-1] == ("RSET", "")  # the refused DATA left the transaction open
    assert relay.send(SENDER, ["a@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert piped.connections == 1


def test_all_rcpts_refused_but_data_accepted_ends_with_a_lone_dot(piped, relays):
    piped.script_rcpt("a@rcpt.test", "550 5.1.1 No such user")
    piped.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
    piped.script_data_command("354 Go ahead")
    relay = relays(piped.url)
    result = relay.send(SENDER, ["a@rcpt.test", "b@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("a@rcpt.test", 550, "bounced"), ("b@rcpt.test", 550, "bounced")]
    assert piped.data_seen == [b""]  # the message itself never went out
    assert piped.received == []
    assert verbs(piped, "RSET") == []  # the end of data closed the transaction
    assert relay.send(SENDER, ["a@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert piped.connections == 1


@pytest.mark.parametrize("pipelining", [True, False])
def test_refused_data_command_applies_to_the_accepted_and_resets(relays, pipelining):
    with Upstream(pipelining=pipelining) as server:
        server.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
        server.script_data_command("451 4.3.0 Not now")
        relay = relays(server.url)
        result = relay.send(SENDER, ["a@rcpt.test", "b@rcpt.test", "c@rcpt.test"], MESSAGE)
        assert outcomes(result) == [
            ("a@rcpt.test", 451, "deferred"),
            ("b@rcpt.test", 550, "bounced"),
            ("c@rcpt.test", 451, "deferred"),
        ]
        assert result.recipients[0].reply == "451 4.3.0 Not now"
        assert server.data_seen == []
        assert server.attempts[-1] == ("RSET", "")
        # Without the RSET the next MAIL would be refused as nested.
        assert relay.send(SENDER, ["a@rcpt.test"], MESSAGE).recipients[0].code == 250
        assert server.connections == 1


@pytest.mark.parametrize(
    ("reply", "code", "outcome"),
    [("451 4.7.1 Greylisted", 451, "deferred"), ("553 5.7.1 Sender rejected", 553, "bounced")],
)
def test_mail_refused_applies_to_everyone(piped, relays, reply, code, outcome):
    piped.script_mail(reply)
    relay = relays(piped.url)
    result = relay.send(SENDER, rcpts(3), MESSAGE)
    assert outcomes(result) == [(r, code, outcome) for r in rcpts(3)]
    assert {r.reply for r in result.recipients} == {reply}
    assert piped.data_seen == []
    # The RCPT and DATA replies that followed (503s) were read, so the session stays in step.
    result = relay.send(SENDER, ["a@rcpt.test", "b@rcpt.test"], MESSAGE)
    assert outcomes(result) == [
        ("a@rcpt.test", 250, "delivered"),
        ("b@rcpt.test", 250, "delivered"),
    ]
    assert piped.received[0].rcpt_tos == ["a@rcpt.test", "b@rcpt.test"]
    assert piped.connections == 1


def test_421_at_mail_on_a_new_connection_defers_everyone(piped, relays):
    piped.script_mail("421 4.3.2 Shutting down")
    relay = relays(piped.url)
    result = relay.send(SENDER, rcpts(2), MESSAGE)
    assert [(r.code, r.outcome) for r in result.recipients] == [(421, "deferred")] * 2
    assert relay.send(SENDER, ["a@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert piped.connections == 2


def test_421_at_rcpt_defers_whoever_has_no_final_reply(piped, relays):
    piped.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
    piped.script_rcpt("c@rcpt.test", "421 4.3.2 Shutting down")
    relay = relays(piped.url)
    rcpt = ["a@rcpt.test", "b@rcpt.test", "c@rcpt.test", "d@rcpt.test"]
    result = relay.send(SENDER, rcpt, MESSAGE)
    assert outcomes(result) == [
        ("a@rcpt.test", 421, "deferred"),
        ("b@rcpt.test", 550, "bounced"),
        ("c@rcpt.test", 421, "deferred"),
        ("d@rcpt.test", 421, "deferred"),
    ]
    assert result.recipients[3].reply == "421 4.3.2 Shutting down"
    assert piped.received == []
    assert relay.send(SENDER, ["a@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert piped.connections == 2


def test_421_after_the_message_defers_the_accepted(piped, relays):
    piped.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
    piped.script_data("421 4.3.2 Shutting down")
    relay = relays(piped.url)
    result = relay.send(SENDER, ["a@rcpt.test", "b@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("a@rcpt.test", 421, "deferred"), ("b@rcpt.test", 550, "bounced")]
    relay.send(SENDER, ["a@rcpt.test"], MESSAGE)
    assert piped.connections == 2


def test_unsendable_recipients_are_not_written(piped, relays):
    relay = relays(piped.url, timeout=2)
    result = relay.send(SENDER, ["bad\r\n@rcpt.test", "ok@rcpt.test"], MESSAGE)
    assert outcomes(result) == [
        ("bad\r\n@rcpt.test", 0, "bounced"),
        ("ok@rcpt.test", 250, "delivered"),
    ]
    assert envelope_writes(piped)[0][1:] == ["RCPT TO:<ok@rcpt.test>", "DATA"]
    result = relay.send(SENDER, ["bad\n@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("bad\n@rcpt.test", 0, "bounced")]
    assert len(envelope_writes(piped)) == 1  # with nobody to send to, no transaction at all
    assert relay.send(SENDER, ["ok@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert piped.connections == 1


# -- the connection --------------------------------------------------------------------------


def test_a_dropped_idle_connection_is_replaced_transparently(piped, relays):
    relay = relays(piped.url)
    relay.send(SENDER, ["a@rcpt.test"], MESSAGE)
    piped.kick()
    result = relay.send(SENDER, ["b@rcpt.test", "c@rcpt.test"], MESSAGE)
    assert outcomes(result) == [
        ("b@rcpt.test", 250, "delivered"),
        ("c@rcpt.test", 250, "delivered"),
    ]
    assert piped.connections == 2
    assert [r.rcpt_tos for r in piped.received] == [["a@rcpt.test"], ["b@rcpt.test", "c@rcpt.test"]]


def test_a_restarted_server_is_reconnected_to(piped, relays):
    relay = relays(piped.url)
    relay.send(SENDER, ["a@rcpt.test"], MESSAGE)
    piped.stop()
    piped.start()
    result = relay.send(SENDER, ["b@rcpt.test", "c@rcpt.test"], MESSAGE)
    assert [r.code for r in result.recipients] == [250, 250]


def test_a_421_greeting_the_reused_connection_is_retried_on_a_new_one(piped, relays):
    relay = relays(piped.url)
    relay.send(SENDER, ["a@rcpt.test"], MESSAGE)
    piped.script_mail("421 4.4.2 Idle too long")
    result = relay.send(SENDER, ["b@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("b@rcpt.test", 250, "delivered")]
    assert piped.connections == 2


def test_timeout_waiting_for_the_final_reply_defers_the_accepted(piped, relays):
    piped.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
    relay = relays(piped.url, timeout=0.3)
    piped.stall()
    result = relay.send(SENDER, ["a@rcpt.test", "b@rcpt.test"], MESSAGE)
    assert piped.wait_stalled(1)
    piped.release()
    assert outcomes(result) == [("a@rcpt.test", 0, "deferred"), ("b@rcpt.test", 550, "bounced")]
    assert result.recipients[0].reply.startswith("timed out after 0.3s talking to 127.0.0.1:")
    assert relay.send(SENDER, ["a@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert piped.connections == 2


# -- options and TLS -------------------------------------------------------------------------


def test_smtputf8_8bitmime_and_size_are_still_declared(piped, relays):
    message = "Subject: Olá\r\n\r\nÇa marche, José.\r\n".encode()
    result = relays(piped.url).send(SENDER, ["josé@rcpt.test", "ana@rcpt.test"], message)
    assert [r.code for r in result.recipients] == [250, 250]
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


def test_pipelining_over_starttls(tmp_path, relays):
    certfile, keyfile = make_self_signed_cert(tmp_path / "tls")
    context = server_tls_context(certfile, keyfile)
    with Upstream(tls_context=context, cafile=certfile, pipelining=True) as server:
        relay = relays(server.url)
        server.script_rcpt("b@rcpt.test", "550 5.1.1 No such user")
        result = relay.send(SENDER, ["a@rcpt.test", "b@rcpt.test", "c@rcpt.test"], MESSAGE)
        assert [r.code for r in result.recipients] == [250, 550, 250]
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
        relay.close()
