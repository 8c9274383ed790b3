"""The relay against a real SMTP server: outcomes, connections, TLS, AUTH; and the capture sink."""

from __future__ import annotations

import ssl
from urllib.parse import quote

import pytest

from layang.delivery.relay import RelayConfigError, SmtpRelay, relay_from_url
from tests.upstream import Upstream, make_self_signed_cert, server_tls_context

pytestmark = pytest.mark.usefixtures("no_threads_left_behind")

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


@pytest.fixture
def certificate(tmp_path):
    return make_self_signed_cert(tmp_path / "cert")


def outcomes(result):
    return [(r.recipient, r.code, r.outcome) for r in result.recipients]


def verbs(server, verb):
    return [arg for v, arg in server.attempts if v == verb]


# -- delivery and per-recipient outcomes ------------------------------------------------------


def test_delivers_the_bytes_unchanged(upstream, relays):
    result = relays(upstream.url).send("shop@sender.test", ["ana@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("ana@rcpt.test", 250, "delivered")]
    assert result.recipients[0].reply == "250 2.0.0 OK queued"
    (received,) = upstream.received
    assert received.data == MESSAGE
    assert received.mail_from == "shop@sender.test"
    assert received.rcpt_tos == ["ana@rcpt.test"]
    assert received.tls is False
    assert ("EHLO", "relay.test") in upstream.attempts


def test_bare_line_feeds_go_out_as_crlf(upstream, relays):
    relays(upstream.url).send("a@sender.test", ["b@rcpt.test"], b"Subject: x\n\nline\nnext\n")
    assert upstream.wait_for(1)[0].data == b"Subject: x\r\n\r\nline\r\nnext\r\n"


@pytest.mark.parametrize(
    "message",
    [b"Subject: x\r\n\r\nline\rnext\r\n", b"Subject: x\r\n\r\nline\r\nnext\n", b"Subject: x\r"],
)
def test_any_bare_line_end_is_normalised_unless_said_clean(upstream, relays, message):
    relay = relays(upstream.url)
    relay.send("a@sender.test", ["b@rcpt.test"], message)
    relay.send("a@sender.test", ["b@rcpt.test"], message, crlf_clean=False)
    fixed = message.replace(b"\r\n", b"\n").replace(b"\r", b"\n").replace(b"\n", b"\r\n")
    assert [r.data for r in upstream.wait_for(2)] == [fixed, fixed]


def test_bytes_said_to_be_crlf_clean_are_not_rescanned(upstream, relays):
    # A caller vouching for its line ends is believed: the bytes go out as given (the server
    # then sees one line where an LF was), which shows that no normalising pass ran.
    relays(upstream.url).send(
        "a@sender.test", ["b@rcpt.test"], b"Subject: x\r\n\r\nline\nnext\r\n", crlf_clean=True
    )
    assert upstream.wait_for(1)[0].data == b"Subject: x\r\n\r\nline\nnext\r\n"


def test_eight_bit_body_and_international_recipient(upstream, relays):
    message = "Subject: Olá\r\n\r\nÇa marche, José.\r\n".encode()
    result = relays(upstream.url).send("shop@sender.test", ["josé@rcpt.test"], message)
    assert outcomes(result) == [("josé@rcpt.test", 250, "delivered")]
    (received,) = upstream.received
    assert received.data == message
    assert received.rcpt_tos == ["josé@rcpt.test"]


def test_each_recipient_gets_its_own_reply(upstream, relays):
    upstream.script_rcpt("later@rcpt.test", "451 4.3.0 Try again later")
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 No such user")
    rcpts = ["ok@rcpt.test", "later@rcpt.test", "gone@rcpt.test"]
    result = relays(upstream.url).send("shop@sender.test", rcpts, MESSAGE)
    assert outcomes(result) == [
        ("ok@rcpt.test", 250, "delivered"),
        ("later@rcpt.test", 451, "deferred"),
        ("gone@rcpt.test", 550, "bounced"),
    ]
    by = result.by_recipient()
    assert by["later@rcpt.test"].reply == "451 4.3.0 Try again later"
    assert by["gone@rcpt.test"].reply == "550 5.1.1 No such user"
    assert upstream.received[0].rcpt_tos == ["ok@rcpt.test"]


@pytest.mark.parametrize(
    ("reply", "code", "outcome"),
    [("451 4.7.1 Greylisted", 451, "deferred"), ("553 5.7.1 Sender rejected", 553, "bounced")],
)
def test_mail_from_rejection_applies_to_everyone(upstream, relays, reply, code, outcome):
    upstream.script_mail(reply)
    relay = relays(upstream.url)
    result = relay.send("shop@sender.test", ["a@rcpt.test", "b@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("a@rcpt.test", code, outcome), ("b@rcpt.test", code, outcome)]
    assert {r.reply for r in result.recipients} == {reply}
    assert verbs(upstream, "RCPT") == []
    # The session stays usable.
    assert relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert upstream.connections == 1


@pytest.mark.parametrize(
    ("reply", "code", "outcome"),
    [("451 4.3.0 Try later", 451, "deferred"), ("554 5.6.0 Message rejected", 554, "bounced")],
)
def test_data_reply_applies_to_every_accepted_recipient(upstream, relays, reply, code, outcome):
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 No such user")
    upstream.script_data(reply)
    rcpts = ["a@rcpt.test", "gone@rcpt.test", "b@rcpt.test"]
    result = relays(upstream.url).send("shop@sender.test", rcpts, MESSAGE)
    assert outcomes(result) == [
        ("a@rcpt.test", code, outcome),
        ("gone@rcpt.test", 550, "bounced"),
        ("b@rcpt.test", code, outcome),
    ]
    assert result.by_recipient()["a@rcpt.test"].reply == reply
    assert upstream.received == []
    assert upstream.data_seen == [MESSAGE]


def test_no_accepted_recipient_means_no_data(upstream, relays):
    upstream.script_rcpt("a@rcpt.test", "550 5.1.1 unknown")
    relay = relays(upstream.url)
    result = relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("a@rcpt.test", 550, "bounced")]
    assert upstream.data_seen == []
    assert upstream.attempts[-1] == ("RSET", "")
    assert relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE).recipients[0].code == 250


def test_421_on_rcpt_defers_the_rest_and_drops_the_connection(upstream, relays):
    upstream.script_rcpt("b@rcpt.test", "421 4.3.2 Shutting down")
    relay = relays(upstream.url)
    rcpts = ["a@rcpt.test", "b@rcpt.test", "c@rcpt.test"]
    result = relay.send("shop@sender.test", rcpts, MESSAGE)
    assert [r.outcome for r in result.recipients] == ["deferred"] * 3
    assert {r.code for r in result.recipients} == {421}
    assert verbs(upstream, "RCPT") == ["a@rcpt.test", "b@rcpt.test"]
    relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    assert upstream.connections == 2


def test_no_recipients_is_a_no_op(upstream, relays):
    assert relays(upstream.url).send("shop@sender.test", [], MESSAGE).recipients == ()
    assert upstream.connections == 0


# -- the connection ------------------------------------------------------------------------


def test_connection_is_reused_without_rset_after_clean_transactions(upstream, relays):
    relay = relays(upstream.url)
    for n in range(3):
        result = relay.send("shop@sender.test", [f"r{n}@rcpt.test"], MESSAGE)
        assert result.recipients[0].outcome == "delivered"
    assert upstream.connections == 1
    assert len(verbs(upstream, "RSET")) == 0  # a completed transaction leaves a clean state
    assert len(verbs(upstream, "MAIL")) == 3
    assert len(upstream.received) == 3
    assert len(upstream.received) == 3


def test_reconnects_when_the_server_dropped_the_idle_connection(upstream, relays):
    relay = relays(upstream.url)
    relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    upstream.kick()
    result = relay.send("shop@sender.test", ["b@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("b@rcpt.test", 250, "delivered")]
    assert upstream.connections == 2
    assert [r.rcpt_tos for r in upstream.received] == [["a@rcpt.test"], ["b@rcpt.test"]]


def test_reconnects_after_the_server_restarted(upstream, relays):
    relay = relays(upstream.url)
    relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    upstream.stop()
    upstream.start()
    result = relay.send("shop@sender.test", ["b@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("b@rcpt.test", 250, "delivered")]


def test_idle_connection_is_closed_rather_than_reused(upstream, relays):
    relay = relays(upstream.url)
    assert isinstance(relay, SmtpRelay)
    relay.max_idle = 0.0
    relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    relay.send("shop@sender.test", ["b@rcpt.test"], MESSAGE)
    assert upstream.connections == 2
    assert verbs(upstream, "QUIT") == [""]
    assert verbs(upstream, "RSET") == []


def test_close_says_quit(upstream, relays):
    relay = relays(upstream.url)
    relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    relay.close()
    relay.close()
    assert verbs(upstream, "QUIT") == [""]


def test_connection_refused_is_deferred_without_a_code(upstream, relays):
    url = upstream.url
    upstream.stop()
    result = relays(url).send("shop@sender.test", ["a@rcpt.test", "b@rcpt.test"], MESSAGE)
    assert [(r.code, r.outcome) for r in result.recipients] == [(0, "deferred")] * 2
    assert "refused" in result.recipients[0].reply
    assert f"127.0.0.1:{upstream.port}" in result.recipients[0].reply


def test_timeout_waiting_for_the_data_reply_defers(upstream, relays):
    relay = relays(upstream.url, timeout=0.3)
    upstream.stall()
    result = relay.send("shop@sender.test", ["a@rcpt.test", "b@rcpt.test"], MESSAGE)
    assert upstream.wait_stalled(1)
    upstream.release()
    assert [(r.code, r.outcome) for r in result.recipients] == [(0, "deferred")] * 2
    assert result.recipients[0].reply == f"timed out after 0.3s talking to {upstream.host}:" + str(
        upstream.port
    )
    # That connection is not trusted again.
    assert relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE).recipients[0].code == 250
    assert upstream.connections == 2


# -- TLS and AUTH --------------------------------------------------------------------------


def test_starttls_is_used_when_offered(tls_upstream, relays):
    assert tls_upstream.url == f"smtp://127.0.0.1:{tls_upstream.port}"
    result = relays(tls_upstream.url).send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("a@rcpt.test", 250, "delivered")]
    assert tls_upstream.received[0].tls is True
    assert verbs(tls_upstream, "STARTTLS") == [""]
    assert verbs(tls_upstream, "EHLO") == ["relay.test", "relay.test"]


def incompatible_tls_context(certificate):
    """A server TLS context no default client can agree with (no shared cipher)."""
    context = server_tls_context(*certificate)
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers("AES256-GCM-SHA384")  # RSA key exchange, which clients no longer offer
    return context


def test_failed_opportunistic_handshake_falls_back_to_plaintext(certificate, relays):
    context = incompatible_tls_context(certificate)
    with Upstream(tls_context=context) as server:
        result = relays(server.url).send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
        assert outcomes(result) == [("a@rcpt.test", 250, "delivered")]
        assert server.received[0].tls is False
        assert server.connections == 2


def test_required_tls_does_not_fall_back(certificate, relays):
    context = incompatible_tls_context(certificate)
    with Upstream(tls_context=context) as server:
        result = relays(f"{server.url}?tls=required&verify=off").send(
            "shop@sender.test", ["a@rcpt.test"], MESSAGE
        )
        assert [(r.code, r.outcome) for r in result.recipients] == [(0, "deferred")]
        assert result.recipients[0].reply.startswith("TLS with 127.0.0.1:")
        assert server.received == []


def test_tls_off_never_starts_tls(tls_upstream, relays):
    relays(tls_upstream.url + "?tls=off").send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    assert tls_upstream.received[0].tls is False
    assert verbs(tls_upstream, "STARTTLS") == []


def test_tls_required_verifies_against_the_cafile(tls_upstream, relays):
    url = f"{tls_upstream.url}?tls=required&cafile={quote(str(tls_upstream.cafile))}"
    result = relays(url).send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    assert outcomes(result) == [("a@rcpt.test", 250, "delivered")]
    assert tls_upstream.received[0].tls is True


def test_tls_required_rejects_an_untrusted_certificate(tls_upstream, relays):
    result = relays(f"{tls_upstream.url}?tls=required").send(
        "shop@sender.test", ["a@rcpt.test"], MESSAGE
    )
    assert [(r.code, r.outcome) for r in result.recipients] == [(0, "deferred")]
    assert "certificate" in result.recipients[0].reply
    assert verbs(tls_upstream, "MAIL") == []


def test_tls_required_with_verification_off(tls_upstream, relays):
    url = f"{tls_upstream.url}?tls=required&verify=off"
    result = relays(url).send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    assert result.recipients[0].outcome == "delivered"
    assert tls_upstream.received[0].tls is True


def test_tls_required_without_starttls_defers(upstream, relays):
    url = f"smtp://127.0.0.1:{upstream.port}?tls=required"
    result = relays(url).send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    assert [(r.code, r.outcome) for r in result.recipients] == [(0, "deferred")]
    assert "does not offer STARTTLS" in result.recipients[0].reply
    assert verbs(upstream, "MAIL") == []


def test_smtps_implicit_tls(certificate, relays):
    certfile, keyfile = certificate
    with Upstream(ssl_context=server_tls_context(certfile, keyfile), cafile=certfile) as server:
        assert server.url.startswith("smtps://")
        relay = relays(server.url)
        result = relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
        assert outcomes(result) == [("a@rcpt.test", 250, "delivered")]
        assert server.received[0].tls is True
        assert server.received[0].data == MESSAGE
        relay.close()


def test_smtps_untrusted_certificate_defers(certificate, relays):
    certfile, keyfile = certificate
    with Upstream(ssl_context=server_tls_context(certfile, keyfile)) as server:
        result = relays(f"smtps://127.0.0.1:{server.port}").send(
            "shop@sender.test", ["a@rcpt.test"], MESSAGE
        )
        assert [(r.code, r.outcome) for r in result.recipients] == [(0, "deferred")]
        assert "certificate" in result.recipients[0].reply
        assert server.received == []


def test_auth_after_starttls(certificate, relays):
    certfile, keyfile = certificate
    context = server_tls_context(certfile, keyfile)
    with Upstream(tls_context=context, auth_users={"mailer": "s3cret:@/ pw"}) as server:
        url = f"smtp://mailer:{quote('s3cret:@/ pw', safe='')}@127.0.0.1:{server.port}"
        relay = relays(url)
        result = relay.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
        assert outcomes(result) == [("a@rcpt.test", 250, "delivered")]
        received = server.received[0]
        assert received.tls is True
        assert received.auth_user == "mailer"

        wrong = relays(f"smtp://mailer:nope@127.0.0.1:{server.port}")
        result = wrong.send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
        assert [(r.code, r.outcome) for r in result.recipients] == [(535, "deferred")]
        assert result.recipients[0].reply.startswith("authentication failed: 535")
        relay.close()
        wrong.close()


def test_credentials_are_never_sent_without_tls(upstream, relays):
    url = f"smtp://mailer:secret@127.0.0.1:{upstream.port}"
    result = relays(url).send("shop@sender.test", ["a@rcpt.test"], MESSAGE)
    assert [(r.code, r.outcome) for r in result.recipients] == [(0, "deferred")]
    assert "without TLS" in result.recipients[0].reply
    assert "secret" not in result.recipients[0].reply
    assert verbs(upstream, "MAIL") == []


# -- capture -------------------------------------------------------------------------------


def test_capture_writes_one_file_per_recipient(tmp_path):
    directory = tmp_path / "new" / "outbox"
    relay = relay_from_url(f"capture:{directory}")
    result = relay.send(
        "shop@sender.test", ["ana@rcpt.test", "b/../x@rcpt.test"], MESSAGE, reference="T1"
    )
    assert [(r.code, r.outcome) for r in result.recipients] == [(250, "delivered")] * 2
    files = sorted(directory.iterdir())
    assert len(files) == 2
    assert all(f.suffix == ".eml" and f.name.startswith("T1-") for f in files)
    assert all(r.reply.startswith("250 2.0.0 captured as T1-") for r in result.recipients)
    by_name = {r.reply.rsplit(" ", 1)[1]: r.recipient for r in result.recipients}
    assert set(by_name) == {f.name for f in files}
    for path in files:
        recipient = by_name[path.name]
        assert path.read_bytes() == (
            f"Return-Path: <shop@sender.test>\r\nDelivered-To: {recipient}\r\n".encode() + MESSAGE
        )
    relay.close()


def test_capture_without_reference_and_failure_defers(tmp_path):
    relay = relay_from_url(f"capture:{tmp_path / 'out'}")
    result = relay.send("a@sender.test", ["b@rcpt.test"], MESSAGE, crlf_clean=True)
    (path,) = (tmp_path / "out").glob("msg-b@rcpt.test-*.eml")
    assert len(path.name) == len("msg-b@rcpt.test-12345678.eml")
    assert result.recipients[0].code == 250

    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    result = relay_from_url(f"capture:{blocked}").send("a@sender.test", ["b@rcpt.test"], MESSAGE)
    assert [(r.code, r.outcome) for r in result.recipients] == [(0, "deferred")]
    assert str(blocked) in result.recipients[0].reply


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "",
        "mail.example.com:25",
        "http://mail.example.com",
        "smtp:mail.example.com",
        "smtp://",
        "smtp://:25",
        "smtp://mail.example.com:99999",
        "smtp://mail.example.com:port",
        "smtp://mail.example.com/path",
        "smtp://mail.example.com?tls=on",
        "smtp://mail.example.com?tls=",
        "smtp://mail.example.com?tsl=off",
        "smtp://mail.example.com?tls=off&tls=required",
        "smtp://mail.example.com?cafile=/etc/ssl/ca.pem",
        "smtp://mail.example.com?verify=off",
        "smtp://mail.example.com?tls=required&verify=maybe",
        "smtp://mail.example.com?tls=required&cafile=/nonexistent/ca.pem",
        "smtps://mail.example.com?tls=off",
        "smtp://user@mail.example.com",
        "smtp://:pw@mail.example.com",
        "smtp://us%C3%A9r:pw@mail.example.com",
        "capture:",
    ],
)
def test_bad_urls_are_refused(url):
    with pytest.raises(RelayConfigError):
        relay_from_url(url)


def test_config_errors_do_not_leak_the_password():
    with pytest.raises(RelayConfigError) as caught:
        relay_from_url("smtp://user:hunter2@mail.example.com/x")
    assert "hunter2" not in str(caught.value)


def test_url_forms(tmp_path, certificate):
    plain = relay_from_url("SMTP://mail.example.com")
    assert isinstance(plain, SmtpRelay)
    assert (plain.host, plain.port, plain.tls, plain.implicit_tls) == (
        "mail.example.com",
        25,
        "may",
        False,
    )
    assert plain.credentials is None
    secure = relay_from_url("smtps://u%40x:p%2Fw@[::1]")
    assert isinstance(secure, SmtpRelay)
    assert (secure.host, secure.port, secure.tls, secure.implicit_tls) == (
        "::1",
        465,
        "required",
        True,
    )
    assert secure.credentials == ("u@x", "p/w")
    assert secure.where == "[::1]:465"
    trusted = relay_from_url(f"smtp://h:2525?tls=required&cafile={certificate[0]}")
    assert isinstance(trusted, SmtpRelay)
    assert trusted.port == 2525 and trusted.context is not None
    off = relay_from_url("smtp://h?tls=off")
    assert isinstance(off, SmtpRelay) and off.context is None
