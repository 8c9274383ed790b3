"""The SMTP client session (the one the engine sends with) against a real SMTP server:
per-recipient outcomes, line ends, reused and stale sessions, timeouts, TLS and AUTH.

Pipelining itself is in test_pipelining.py; what the engine does around a session (a new one
for a stale one, idle sessions closed) in test_engine.py.
"""

from __future__ import annotations

import ssl
from urllib.parse import quote

import pytest

from layang.delivery.transports import Refused, Stale
from tests.delivery.conftest import MESSAGE
from tests.support.upstream import Upstream, make_self_signed_cert, server_tls_context

pytestmark = pytest.mark.usefixtures("no_threads_left_behind")


@pytest.fixture
def certificate(tmp_path):
    return make_self_signed_cert(tmp_path / "cert")


def refusal(client) -> Refused:
    with pytest.raises(Refused) as caught:
        client.open()
    return caught.value


def outcomes(results):
    return [(r.recipient, r.code, r.outcome) for r in results]


def verbs(server, verb):
    return [arg for v, arg in server.attempts if v == verb]


# -- delivery and per-recipient outcomes ------------------------------------------------------


def test_delivers_the_bytes_unchanged(upstream, clients):
    results = clients(upstream.url).send(["ana@rcpt.test"])
    assert outcomes(results) == [("ana@rcpt.test", 250, "delivered")]
    assert results[0].reply == "250 2.0.0 OK queued"
    (received,) = upstream.received
    assert received.data == MESSAGE
    assert received.mail_from == "shop@sender.test"
    assert received.rcpt_tos == ["ana@rcpt.test"]
    assert received.tls is False
    assert ("EHLO", "relay.test") in upstream.attempts


def test_bare_line_feeds_go_out_as_crlf(upstream, clients):
    clients(upstream.url).send(["b@rcpt.test"], b"Subject: x\n\nline\nnext\n")
    assert upstream.wait_for(1)[0].data == b"Subject: x\r\n\r\nline\r\nnext\r\n"


@pytest.mark.parametrize(
    "message",
    [b"Subject: x\r\n\r\nline\rnext\r\n", b"Subject: x\r\n\r\nline\r\nnext\n", b"Subject: x\r"],
)
def test_any_bare_line_end_is_normalised_unless_said_clean(upstream, clients, message):
    client = clients(upstream.url)
    client.send(["b@rcpt.test"], message)
    client.send(["b@rcpt.test"], message, crlf_clean=False)
    fixed = message.replace(b"\r\n", b"\n").replace(b"\r", b"\n").replace(b"\n", b"\r\n")
    assert [r.data for r in upstream.wait_for(2)] == [fixed, fixed]


def test_bytes_said_to_be_crlf_clean_are_not_rescanned(upstream, clients):
    # A caller vouching for its line ends is believed: the bytes go out as given (the server
    # then sees one line where an LF was), which shows that no normalising pass ran.
    clients(upstream.url).send(
        ["b@rcpt.test"], b"Subject: x\r\n\r\nline\nnext\r\n", crlf_clean=True
    )
    assert upstream.wait_for(1)[0].data == b"Subject: x\r\n\r\nline\nnext\r\n"


def test_eight_bit_body_and_international_recipient(upstream, clients):
    message = "Subject: Olá\r\n\r\nÇa marche, José.\r\n".encode()
    results = clients(upstream.url).send(["josé@rcpt.test"], message)
    assert outcomes(results) == [("josé@rcpt.test", 250, "delivered")]
    (received,) = upstream.received
    assert received.data == message
    assert received.rcpt_tos == ["josé@rcpt.test"]


def test_each_recipient_gets_its_own_reply(upstream, clients):
    upstream.script_rcpt("later@rcpt.test", "451 4.3.0 Try again later")
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 No such user")
    results = clients(upstream.url).send(["ok@rcpt.test", "later@rcpt.test", "gone@rcpt.test"])
    assert outcomes(results) == [
        ("ok@rcpt.test", 250, "delivered"),
        ("later@rcpt.test", 451, "deferred"),
        ("gone@rcpt.test", 550, "bounced"),
    ]
    assert results[1].reply == "451 4.3.0 Try again later"
    assert results[2].reply == "550 5.1.1 No such user"
    assert upstream.received[0].rcpt_tos == ["ok@rcpt.test"]


@pytest.mark.parametrize(
    ("reply", "code", "outcome"),
    [("451 4.7.1 Greylisted", 451, "deferred"), ("553 5.7.1 Sender rejected", 553, "bounced")],
)
def test_mail_from_rejection_applies_to_everyone(upstream, clients, reply, code, outcome):
    upstream.script_mail(reply)
    client = clients(upstream.url)
    results = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert outcomes(results) == [("a@rcpt.test", code, outcome), ("b@rcpt.test", code, outcome)]
    assert {r.reply for r in results} == {reply}
    assert verbs(upstream, "RCPT") == []
    # The session stays usable.
    assert client.send(["a@rcpt.test"])[0].code == 250
    assert upstream.connections == 1


@pytest.mark.parametrize(
    ("reply", "code", "outcome"),
    [("451 4.3.0 Try later", 451, "deferred"), ("554 5.6.0 Message rejected", 554, "bounced")],
)
def test_data_reply_applies_to_every_accepted_recipient(upstream, clients, reply, code, outcome):
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 No such user")
    upstream.script_data(reply)
    results = clients(upstream.url).send(["a@rcpt.test", "gone@rcpt.test", "b@rcpt.test"])
    assert outcomes(results) == [
        ("a@rcpt.test", code, outcome),
        ("gone@rcpt.test", 550, "bounced"),
        ("b@rcpt.test", code, outcome),
    ]
    assert results[0].reply == reply
    assert upstream.received == []
    assert upstream.data_seen == [MESSAGE]


def test_no_accepted_recipient_means_no_data(upstream, clients):
    upstream.script_rcpt("a@rcpt.test", "550 5.1.1 unknown")
    client = clients(upstream.url)
    assert outcomes(client.send(["a@rcpt.test"])) == [("a@rcpt.test", 550, "bounced")]
    assert upstream.data_seen == []
    assert upstream.attempts[-1] == ("RSET", "")
    assert client.send(["a@rcpt.test"])[0].code == 250


def test_421_on_rcpt_defers_the_rest_and_drops_the_session(upstream, clients):
    upstream.script_rcpt("b@rcpt.test", "421 4.3.2 Shutting down")
    client = clients(upstream.url)
    results = client.send(["a@rcpt.test", "b@rcpt.test", "c@rcpt.test"])
    assert [r.outcome for r in results] == ["deferred"] * 3
    assert {r.code for r in results} == {421}
    assert verbs(upstream, "RCPT") == ["a@rcpt.test", "b@rcpt.test"]
    assert client.session.closed


def test_no_recipients_starts_no_transaction(upstream, clients):
    assert clients(upstream.url).send([]) == []
    assert verbs(upstream, "MAIL") == []


def test_unsendable_addresses_bounce_without_a_transaction(upstream, clients):
    client = clients(upstream.url)
    assert outcomes(client.send(["a@rcpt.test"], sender="bad\r\n@sender.test")) == [
        ("a@rcpt.test", 0, "bounced")
    ]
    (result,) = client.send(["b\n@rcpt.test"])
    assert (result.code, result.outcome) == (0, "bounced")
    assert "line break" in result.reply
    assert verbs(upstream, "MAIL") == []


# -- the session ---------------------------------------------------------------------------


def test_session_is_reused_without_rset_after_clean_transactions(upstream, clients):
    client = clients(upstream.url)
    for n in range(3):
        assert client.send([f"r{n}@rcpt.test"])[0].outcome == "delivered"
    assert client.session.transactions == 3
    assert upstream.connections == 1
    assert verbs(upstream, "RSET") == []  # a completed transaction leaves a clean state
    assert len(verbs(upstream, "MAIL")) == 3
    assert len(upstream.received) == 3


def test_a_reused_session_the_server_dropped_is_stale(upstream, clients):
    client = clients(upstream.url)
    client.send(["a@rcpt.test"])
    upstream.kick()
    with pytest.raises(Stale):
        client.send(["b@rcpt.test"])
    assert client.session.closed
    assert [r.rcpt_tos for r in upstream.received] == [["a@rcpt.test"]]


def test_a_reused_session_to_a_restarted_server_is_stale(upstream, clients):
    client = clients(upstream.url)
    client.send(["a@rcpt.test"])
    upstream.stop()
    upstream.start()
    with pytest.raises(Stale):
        client.send(["b@rcpt.test"])


@pytest.mark.parametrize("pipelining", [True, False])
def test_a_421_on_a_reused_session_says_the_session_is_stale(sessions, pipelining):
    with Upstream(pipelining=True) as server:
        client = sessions(server.url, pipelining=pipelining).open()
        assert client.send(["a@rcpt.test"])[0].outcome == "delivered"
        server.script_mail("421 4.4.2 Idle too long")
        with pytest.raises(Stale):
            client.send(["b@rcpt.test"])
        assert client.session.closed
        assert [r.rcpt_tos for r in server.received] == [["a@rcpt.test"]]


def test_a_421_slow_down_on_a_reused_session_is_the_sites_answer(upstream, clients):
    client = clients(upstream.url)
    client.send(["a@rcpt.test"])
    reply = "421 4.7.28 Our system has detected an unusual rate of unsolicited mail"
    upstream.script_mail(reply)
    (result,) = client.send(["b@rcpt.test"])
    assert (result.code, result.outcome, result.reply) == (421, "deferred", reply)
    assert client.session.closed


def test_a_421_on_a_new_session_is_its_answer_not_staleness(upstream, clients):
    upstream.script_mail("421 4.4.2 Idle too long")
    client = clients(upstream.url)
    assert outcomes(client.send(["a@rcpt.test"])) == [("a@rcpt.test", 421, "deferred")]
    assert client.session.closed


def test_close_says_quit_once(upstream, clients):
    client = clients(upstream.url)
    client.send(["a@rcpt.test"])
    client.run(client.session.close())
    client.run(client.session.close())
    assert client.session.closed
    assert verbs(upstream, "QUIT") == [""]


def test_connection_refused_says_so_without_a_code(upstream, sessions):
    url = upstream.url
    upstream.stop()
    refused = refusal(sessions(url))
    assert (refused.kind, refused.code) == ("connect", 0)
    assert "refused" in refused.reply
    assert f"127.0.0.1:{upstream.port}" in refused.reply


def test_timeout_waiting_for_the_data_reply_defers(upstream, clients):
    client = clients(upstream.url, timeout=0.3)
    upstream.stall()
    results = client.send(["a@rcpt.test", "b@rcpt.test"])
    assert upstream.wait_stalled(1)
    upstream.release()
    assert [(r.code, r.outcome) for r in results] == [(0, "deferred")] * 2
    assert results[0].reply == f"timed out after 0.3s talking to {upstream.host}:{upstream.port}"
    assert client.session.closed  # that session is not trusted again


def test_the_session_says_what_a_delivery_event_records(tls_upstream, clients):
    client = clients(tls_upstream.url)
    client.send(["a@rcpt.test"])
    detail = client.session.detail()
    assert (detail["host"], detail["address"]) == ("127.0.0.1", "127.0.0.1")
    assert detail["tls"]["version"].startswith("TLS") and detail["tls"]["verified"] is False


# -- TLS and AUTH --------------------------------------------------------------------------


def test_starttls_is_used_when_offered(tls_upstream, clients):
    assert tls_upstream.url == f"smtp://127.0.0.1:{tls_upstream.port}"
    results = clients(tls_upstream.url).send(["a@rcpt.test"])
    assert outcomes(results) == [("a@rcpt.test", 250, "delivered")]
    assert tls_upstream.received[0].tls is True
    assert verbs(tls_upstream, "STARTTLS") == [""]
    assert verbs(tls_upstream, "EHLO") == ["relay.test", "relay.test"]


def incompatible_tls_context(certificate):
    """A server TLS context no default client can agree with (no shared cipher)."""
    context = server_tls_context(*certificate)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers("AES256-GCM-SHA384")  # RSA key exchange, which clients no longer offer
    return context


def test_failed_opportunistic_handshake_falls_back_to_plaintext(certificate, clients):
    with Upstream(tls_context=incompatible_tls_context(certificate)) as server:
        results = clients(server.url).send(["a@rcpt.test"])
        assert outcomes(results) == [("a@rcpt.test", 250, "delivered")]
        assert server.received[0].tls is False
        assert server.connections == 2


def test_required_tls_does_not_fall_back(certificate, sessions):
    with Upstream(tls_context=incompatible_tls_context(certificate)) as server:
        refused = refusal(sessions(f"{server.url}?tls=required&verify=off"))
        assert (refused.kind, refused.code) == ("tls", 0)
        assert refused.reply.startswith("TLS with 127.0.0.1:")
        assert server.received == []


def test_tls_off_never_starts_tls(tls_upstream, clients):
    clients(tls_upstream.url + "?tls=off").send(["a@rcpt.test"])
    assert tls_upstream.received[0].tls is False
    assert verbs(tls_upstream, "STARTTLS") == []


def test_tls_required_verifies_against_the_cafile(tls_upstream, clients):
    url = f"{tls_upstream.url}?tls=required&cafile={quote(str(tls_upstream.cafile))}"
    results = clients(url).send(["a@rcpt.test"])
    assert outcomes(results) == [("a@rcpt.test", 250, "delivered")]
    assert tls_upstream.received[0].tls is True


def test_tls_required_rejects_an_untrusted_certificate(tls_upstream, sessions):
    refused = refusal(sessions(f"{tls_upstream.url}?tls=required"))
    assert (refused.kind, refused.code) == ("tls", 0)
    assert "certificate" in refused.reply
    assert verbs(tls_upstream, "MAIL") == []


def test_tls_required_with_verification_off(tls_upstream, clients):
    results = clients(f"{tls_upstream.url}?tls=required&verify=off").send(["a@rcpt.test"])
    assert results[0].outcome == "delivered"
    assert tls_upstream.received[0].tls is True


def test_tls_required_without_starttls_is_refused(upstream, sessions):
    refused = refusal(sessions(f"smtp://127.0.0.1:{upstream.port}?tls=required"))
    assert refused.kind == "tls"
    assert "does not offer STARTTLS" in refused.reply
    assert verbs(upstream, "MAIL") == []


# Replies a man in the middle writes behind the 220 to STARTTLS, before the handshake
# (CVE-2011-0411): read as the TLS phase's, they would offer REQUIRETLS and refuse the mail.
INJECTED = b"250-upstream.test\r\n250 REQUIRETLS\r\n550 5.1.1 no such user\r\n"


@pytest.mark.parametrize("options", ["", "?tls=required&verify=off"])
def test_bytes_behind_the_starttls_220_drop_the_session(tls_upstream, sessions, options):
    tls_upstream.starttls_injection = INJECTED
    url = tls_upstream.url + options
    client = sessions(url)
    refused = refusal(client)
    assert (refused.kind, refused.code) == ("tls", 0)
    assert "after its 220 to STARTTLS" in refused.reply, refused.reply
    assert client.session.closed
    # Nothing after STARTTLS: no handshake (the server notes STARTTLS once it completes), no
    # second EHLO, no envelope, no plaintext retry.
    assert tls_upstream.attempts == [("EHLO", "relay.test")]
    assert tls_upstream.connections == 1
    assert tls_upstream.received == []


def test_only_the_ehlo_after_tls_says_what_the_server_offers(certificate, clients):
    # The plaintext EHLO offered REQUIRETLS (a downgrade-minded middlebox may add anything
    # there); the server itself offers it only if its EHLO inside TLS says so.
    with Upstream(tls_context=server_tls_context(*certificate)) as server:
        client = clients(server.url)
        assert client.session.tls_info is not None
        assert not client.session.has("REQUIRETLS")
        assert verbs(server, "EHLO") == ["relay.test", "relay.test"]


def test_smtps_implicit_tls(certificate, clients):
    certfile, keyfile = certificate
    with Upstream(ssl_context=server_tls_context(certfile, keyfile), cafile=certfile) as server:
        assert server.url.startswith("smtps://")
        results = clients(server.url).send(["a@rcpt.test"])
        assert outcomes(results) == [("a@rcpt.test", 250, "delivered")]
        assert server.received[0].tls is True
        assert server.received[0].data == MESSAGE


def test_smtps_untrusted_certificate_is_refused(certificate, sessions):
    certfile, keyfile = certificate
    with Upstream(ssl_context=server_tls_context(certfile, keyfile)) as server:
        refused = refusal(sessions(f"smtps://127.0.0.1:{server.port}"))
        assert (refused.kind, refused.code) == ("connect", 0)
        assert "certificate" in refused.reply
        assert server.received == []


def test_auth_after_starttls(certificate, clients, sessions):
    context = server_tls_context(*certificate)
    with Upstream(tls_context=context, auth_users={"mailer": "s3cret:@/ pw"}) as server:
        url = f"smtp://mailer:{quote('s3cret:@/ pw', safe='')}@127.0.0.1:{server.port}"
        results = clients(url).send(["a@rcpt.test"])
        assert outcomes(results) == [("a@rcpt.test", 250, "delivered")]
        received = server.received[0]
        assert received.tls is True
        assert received.auth_user == "mailer"

        refused = refusal(sessions(f"smtp://mailer:nope@127.0.0.1:{server.port}"))
        assert (refused.kind, refused.code) == ("auth", 535)
        assert refused.reply.startswith("authentication failed: 535")


def test_credentials_are_never_sent_without_tls(upstream, sessions):
    refused = refusal(sessions(f"smtp://mailer:secret@127.0.0.1:{upstream.port}"))
    assert (refused.kind, refused.code) == ("auth", 0)
    assert "without TLS" in refused.reply
    assert "secret" not in refused.reply
    assert not any(verb == "AUTH" for verb, _ in upstream.attempts)
    assert verbs(upstream, "MAIL") == []


def test_requiretls_is_a_mail_parameter_and_bounces_where_not_offered(certificate, clients):
    # What the smarthost demands of the session besides (RFC 8689): test_requiretls.py.
    with Upstream(tls_context=server_tls_context(*certificate), requiretls=True) as server:
        assert clients(server.url).send(["a@rcpt.test"], requiretls=True)[0].code == 250
        assert [verb for verb, _ in server.attempts if verb == "REQUIRETLS"] == ["REQUIRETLS"]
    with Upstream() as plain:
        (result,) = clients(plain.url).send(["a@rcpt.test"], requiretls=True)
        assert (result.code, result.outcome) == (550, "bounced")
        assert result.reply == f"550 5.7.30 REQUIRETLS is not supported by 127.0.0.1:{plain.port}"
        assert verbs(plain, "MAIL") == []
