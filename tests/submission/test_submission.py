"""SMTP submission with real clients (smtplib, swaks) over real STARTTLS."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import smtplib
import ssl
import subprocess
from dataclasses import replace
from email.message import EmailMessage
from pathlib import Path

import pytest

from layang.delivery.worker import Worker
from layang.domain import accounts
from layang.models import AuthorizedRecipient, Recipient, Transmission
from layang.submission.server import submission_server
from tests.conftest import drain
from tests.delivery.test_crash import (
    deliver_in_worker_process,
    free_port,
    process_env,
    start,
    stop,
    wait_until,
)

SANDBOX_SENDER = "sandbox@sandbox.layang.test"


@pytest.fixture
def smtp_config(config):
    return replace(config, smtp_bind=f"127.0.0.1:{free_port()}", max_message_bytes=100_000)


@pytest.fixture
def server(app, smtp_config):
    controller = submission_server(smtp_config)
    controller.start()
    yield controller
    controller.stop()


@pytest.fixture
def trial(app):
    account = accounts.create_account("trial-shop")
    key = accounts.create_api_key(account)[1]
    AuthorizedRecipient.create(
        account=account, email="ana@rcpt.test", email_key="ana@rcpt.test", status="verified"
    )
    return account, key


def client_context():
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def connect(smtp_config, tls=True):
    host, port = smtp_config.smtp_host_port
    smtp = smtplib.SMTP(host, port, local_hostname="client.test", timeout=10)
    smtp.ehlo()
    if tls:
        smtp.starttls(context=client_context())
        smtp.ehlo()
    return smtp


def message(to="ana@rcpt.test", **headers):
    msg = EmailMessage()
    msg["From"] = f"Trial Shop <{SANDBOX_SENDER}>"
    msg["To"] = to
    msg["Subject"] = headers.pop("subject", "Submitted over SMTP")
    for name, value in headers.items():
        msg[name.replace("_", "-")] = value
    msg.set_content("Hello from SMTP.\n")
    return msg


def test_starttls_then_auth_then_queued(server, smtp_config, trial, upstream, relay_to):
    account, key = trial
    smtp = connect(smtp_config, tls=False)
    assert smtp.has_extn("starttls")
    assert not smtp.has_extn("auth")  # offered only after STARTTLS
    code, reply = smtp.docmd("AUTH", "PLAIN AGZvbwBiYXI=")
    assert code == 530 and reply.startswith(b"5.7.0")
    code, _ = smtp.docmd("MAIL", f"FROM:<{SANDBOX_SENDER}>")
    assert code == 530  # authentication required
    smtp.starttls(context=client_context())
    smtp.ehlo()
    # Only the real mechanisms: no helper method of the server taken for one.
    assert sorted(smtp.esmtp_features["auth"].split()) == ["LOGIN", "PLAIN"]
    assert int(smtp.esmtp_features["size"]) == smtp_config.max_message_bytes
    smtp.login(account.name, key)
    msg = message(Bcc="hidden@rcpt.test")
    smtp.send_message(msg, to_addrs=["ana@rcpt.test"])
    code, reply = smtp.noop()
    smtp.quit()

    (transmission,) = Transmission.select()
    assert transmission.source == "smtp"
    drain(relay_to(upstream))
    (received,) = upstream.received
    assert received.rcpt_tos == ["ana@rcpt.test"]
    assert received.mail_from.startswith("b+")  # the VERP return path, not the sender
    assert received.message["From"].addresses[0].addr_spec == SANDBOX_SENDER
    got = received.message
    assert got["Subject"] == "Submitted over SMTP"
    assert got["Bcc"] is None and b"hidden@rcpt.test" not in received.data
    assert got["Message-ID"] == f"<{transmission.id}@sandbox.layang.test>"
    assert got["Date"]
    assert got.get_content().strip() == "Hello from SMTP."
    record = Recipient.get()
    assert (record.status, record.recipient_type) == ("Delivery", "to")


def test_reply_names_the_transmission_and_it_is_stored_first(server, smtp_config, trial):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    smtp.mail(SANDBOX_SENDER)
    smtp.rcpt("ana@rcpt.test")
    code, reply = smtp.data(message().as_bytes())
    smtp.quit()
    assert code == 250
    text = reply.decode()
    assert text.startswith("2.0.0 OK queued as ")
    transmission_id = text.rsplit(" ", 1)[1]
    stored = Transmission.get_by_id(transmission_id)  # already committed when 250 was sent
    assert stored.raw and b"Submitted over SMTP" in bytes(stored.raw)


@pytest.mark.parametrize("user_kind", ["wrong-key", "revoked", "other-account", "bad-user"])
def test_wrong_credentials_are_535(server, smtp_config, trial, user_kind):
    account, key = trial
    other = accounts.create_account("other")
    other_key = accounts.create_api_key(other)[1]
    user, password = {
        "wrong-key": (account.name, "lyg_" + "x" * 43),
        "revoked": (account.name, key),
        "other-account": (account.name, other_key),
        "bad-user": ("nobody", key),
    }[user_kind]
    if user_kind == "revoked":
        accounts.revoke_api_key(accounts.list_api_keys(account)[0].id)
    smtp = connect(smtp_config)
    with pytest.raises(smtplib.SMTPAuthenticationError) as error:
        smtp.login(user, password)
    assert error.value.smtp_code == 535
    assert error.value.smtp_error.startswith(b"5.7.8")
    smtp.close()


def test_mailtarget_user_name_and_auth_login(server, smtp_config, trial):
    _, key = trial
    smtp = connect(smtp_config)
    smtp.user, smtp.password = "smtp_mt_injection", key
    code, _ = smtp.auth("LOGIN", smtp.auth_login, initial_response_ok=False)
    assert code == 235
    smtp.quit()


def test_sandbox_rules_per_command(server, smtp_config, trial):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    code, reply = smtp.mail("me@shop.test")
    assert code == 553 and reply.startswith(b"5.7.1")
    smtp.rset()
    assert smtp.mail(SANDBOX_SENDER)[0] == 250
    code, reply = smtp.rcpt("stranger@rcpt.test")
    assert code == 550
    assert reply == b"5.7.1 <stranger@rcpt.test> not an authorized recipient"
    assert smtp.rcpt("ana@rcpt.test")[0] == 250  # the session goes on
    code, _ = smtp.data(message(to="ana@rcpt.test, stranger@rcpt.test").as_bytes())
    assert code == 250
    smtp.quit()
    assert [r.address for r in Recipient.select()] == ["ana@rcpt.test"]


def test_sandbox_header_from_must_be_the_sandbox_sender(server, smtp_config, trial):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    forged = message()
    forged.replace_header("From", '"CEO" <ceo@bank.example>')
    smtp.mail(SANDBOX_SENDER)
    smtp.rcpt("ana@rcpt.test")
    code, reply = smtp.data(forged.as_bytes())
    assert code == 554 and reply.startswith(b"5.7.1")
    assert SANDBOX_SENDER.encode() in reply
    assert Transmission.select().count() == 0
    # The session goes on, and the sandbox sender is accepted in any letter case.
    fine = message()
    fine.replace_header("From", f"Trial Shop <{SANDBOX_SENDER.upper()}>")
    assert smtp.sendmail(SANDBOX_SENDER, ["ana@rcpt.test"], fine.as_bytes()) == {}
    smtp.quit()
    assert Transmission.select().count() == 1


def assert_names_the_limit(reply, smtp_config):
    text = reply.decode()
    assert f"{smtp_config.max_message_bytes} bytes" in text, text
    assert "LAYANG_MAX_MESSAGE_BYTES" in text, text


def test_size_is_enforced(server, smtp_config, trial):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    big = message()
    big.set_content("x" * (smtp_config.max_message_bytes + 10))
    with pytest.raises(smtplib.SMTPSenderRefused) as error:  # SIZE= declared in MAIL FROM
        smtp.send_message(big, to_addrs=["ana@rcpt.test"])
    assert error.value.smtp_code == 552
    assert_names_the_limit(error.value.smtp_error, smtp_config)
    smtp.close()
    assert Transmission.select().count() == 0


def test_live_account_sends_anywhere(server, smtp_config, app, upstream, relay_to):
    live = accounts.create_account("bigshop", live=True)
    key = accounts.create_api_key(live)[1]
    smtp = connect(smtp_config)
    smtp.login("bigshop", key)
    msg = message(to="Someone <someone@rcpt.test>", Cc="copy@rcpt.test")
    msg.replace_header("From", "Big Shop <news@bigshop.test>")
    smtp.send_message(msg, to_addrs=["someone@rcpt.test", "copy@rcpt.test", "blind@rcpt.test"])
    smtp.quit()
    drain(relay_to(upstream))
    kinds = {r.address: r.recipient_type for r in Recipient.select()}
    assert kinds == {"someone@rcpt.test": "to", "copy@rcpt.test": "cc", "blind@rcpt.test": "bcc"}
    transmission = Transmission.get()
    assert transmission.subject == "Submitted over SMTP"
    assert '"name": "Big Shop"' in transmission.from_header


def test_swaks_submission(server, smtp_config, trial, upstream, relay_to):
    if shutil.which("swaks") is None:
        if os.environ.get("LAYANG_REQUIRE_TOOLS"):
            pytest.fail("swaks is required here (apt-get install swaks)")
        pytest.skip("swaks is not installed (apt-get install swaks)")
    account, key = trial
    host, port = smtp_config.smtp_host_port
    result = subprocess.run(
        [
            "swaks",
            "--server",
            f"{host}:{port}",
            "--tls",
            "--auth",
            "LOGIN",
            "--auth-user",
            account.name,
            "--auth-password",
            key,
            "--helo",
            "swaks.test",
            "--from",
            SANDBOX_SENDER,
            "--to",
            "ana@rcpt.test",
            "--header",
            "Subject: Sent with swaks",
            "--body",
            "Hello from swaks.",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "250 2.0.0 OK queued as" in result.stdout
    drain(relay_to(upstream))
    assert upstream.received[0].message["Subject"] == "Sent with swaks"


def test_accepted_message_survives_smtpd_kill(config, trial, upstream, tmp_path):
    account, key = trial
    port = free_port()
    server = start(
        ["smtpd"], process_env(config, LAYANG_SMTP_BIND=f"127.0.0.1:{port}"), tmp_path / "smtpd.log"
    )
    try:

        def listening():
            try:
                smtplib.SMTP("127.0.0.1", port, local_hostname="c.test", timeout=1).close()
                return True
            except OSError:
                return False

        wait_until(listening, 30, "the SMTP server did not come up")
        smtp = smtplib.SMTP("127.0.0.1", port, local_hostname="c.test", timeout=10)
        smtp.starttls(context=client_context())
        smtp.login(account.name, key)
        smtp.send_message(message(subject="kept over smtp"), to_addrs=["ana@rcpt.test"])
        server.send_signal(signal.SIGKILL)  # right after the 250, before any QUIT
        server.wait(10)
        smtp.close()
    finally:
        stop(server)
    deliver_in_worker_process(config, upstream, tmp_path / "worker.log")
    assert upstream.received[0].message["Subject"] == "kept over smtp"


def test_size_is_enforced_without_a_declared_size(server, smtp_config, trial):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    smtp.mail(SANDBOX_SENDER)  # no SIZE= parameter: the limit applies to the data itself
    smtp.rcpt("ana@rcpt.test")
    lines = smtp_config.max_message_bytes // 80 + 10
    code, reply = smtp.data(b"Subject: big\r\n\r\n" + (b"x" * 78 + b"\r\n") * lines)
    assert code == 552
    assert_names_the_limit(reply, smtp_config)
    smtp.close()
    assert Transmission.select().count() == 0


def test_activity_shows_the_submitted_message(
    server, smtp_config, trial, client, upstream, relay_to
):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    smtp.send_message(message(subject="Seen in Activity"), to_addrs=["ana@rcpt.test"])
    smtp.quit()
    drain(relay_to(upstream))
    page = client.get("/v1/layang/activity", headers={"Authorization": f"Bearer {key}"})
    (record,) = page.get_json()["items"]
    assert record["subject"] == "Seen in Activity"
    assert record["status"] == "Delivery"
    assert record["from"] == {"email": SANDBOX_SENDER, "name": "Trial Shop"}
    assert [e["status"] for e in record["events"]] == ["Injection", "Delivery"]
    assert record["events"][0]["detail"] == {"source": "smtp"}


def test_auth_plain_by_challenge_and_login_with_initial_response(server, smtp_config, trial):
    import base64

    account, key = trial
    b64 = lambda raw: base64.b64encode(raw.encode()).decode()  # noqa: E731
    smtp = connect(smtp_config)
    assert smtp.docmd("AUTH", "PLAIN")[0] == 334  # empty challenge, credentials follow
    assert smtp.docmd(b64(f"\0{account.name}\0{key}"))[0] == 235
    smtp.close()
    smtp = connect(smtp_config)
    assert smtp.docmd("AUTH", f"LOGIN {b64(account.name)}")[0] == 334  # asks for the password
    assert smtp.docmd(b64(key))[0] == 235
    smtp.close()
    smtp = connect(smtp_config)
    code, reply = smtp.docmd("AUTH", "PLAIN not-base64!")
    assert code == 501 and reply.startswith(b"5.5.2")
    smtp.close()


def test_a_login_logs_no_warning(server, smtp_config, trial, caplog):
    account, key = trial
    caplog.set_level(logging.DEBUG)
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    smtp.send_message(message(), to_addrs=["ana@rcpt.test"])
    smtp.quit()
    assert Transmission.select().count() == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []


@pytest.mark.parametrize(
    "from_lines",
    [
        [f"From: <{SANDBOX_SENDER}>", "From: CEO <ceo@bank.example>"],
        [f"From: {SANDBOX_SENDER}, ceo@bank.example"],
        [f"From: Staff: {SANDBOX_SENDER}, ceo@bank.example;"],
        ["From: undisclosed-authors:;"],
    ],
    ids=["two-from-headers", "two-addresses", "group", "empty-group"],
)
def test_a_message_must_name_one_author(server, smtp_config, trial, from_lines):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    head = "\r\n".join([*from_lines, "To: ana@rcpt.test", "Subject: Who wrote this?"])
    smtp.mail(SANDBOX_SENDER)
    smtp.rcpt("ana@rcpt.test")
    code, reply = smtp.data(f"{head}\r\n\r\nHello.\r\n".encode())
    assert code == 550 and reply.startswith(b"5.6.0 "), reply
    assert b"From" in reply
    assert Transmission.select().count() == 0
    # One author is fine, in the same session.
    assert smtp.sendmail(SANDBOX_SENDER, ["ana@rcpt.test"], message().as_bytes()) == {}
    smtp.quit()
    assert Transmission.select().count() == 1


# -- the bytes that come out: dot-stuffing undone once at every line start (RFC 5321 §4.5.2),
# whatever ended the line; the fields no recipient may see gone. The capture relay writes what
# would be sent.

HIDDEN_FIELDS = (
    b"Bcc: blind@rcpt.test\r\n"
    b"Resent-Bcc: resent-blind@rcpt.test\r\n"
    b"Return-Path: <client-chosen@sender.test>\r\n"
    b"X-Layang-Stream: transactional\r\n"
    b"X-Layang-Campaign: spring\r\n"
    b"Idempotency-Key: order-42\r\n"
)


def captured(config) -> bytes:
    """The one copy the capture relay wrote, without the two lines it puts on top."""
    worker = Worker(config, name="capture-worker")
    try:
        drain(worker)
    finally:
        worker.close()
    (copy,) = sorted(Path(config.relay_url.removeprefix("capture:")).glob("*.eml"))
    data = copy.read_bytes()
    head, _, message = data.partition(b"Delivered-To: ana@rcpt.test\r\n")
    assert head.startswith(b"Return-Path: <b+")  # the VERP return path, the only one
    return message


def header_of(message: bytes) -> bytes:
    return message.split(b"\r\n\r\n", 1)[0] + b"\r\n"


def test_smtplib_bare_lf_lines_are_unstuffed_once_and_hidden_fields_dropped(
    server, smtp_config, trial, config
):
    account, key = trial
    smtp = connect(smtp_config)
    smtp.login(account.name, key)
    smtp.mail(SANDBOX_SENDER)
    smtp.rcpt("ana@rcpt.test")
    code, _ = smtp.docmd("DATA")
    assert code == 354
    # As written on the wire, stuffed: the body's lines are ".", ".hidden", "..two", "end",
    # some of them ended by a bare LF.
    smtp.send(
        b"From: Trial Shop <" + SANDBOX_SENDER.encode() + b">\r\n"
        b"To: ana@rcpt.test\r\n"
        b"Subject: Dots\r\n" + HIDDEN_FIELDS + b"\r\n"
        b"before\n..\n..hidden\r\n...two\n"
        b"end\r\n.\r\n"
    )
    code, reply = smtp.getreply()
    assert code == 250, reply
    smtp.quit()

    message = captured(config)
    assert message.endswith(b"\r\n\r\nbefore\n.\n.hidden\r\n..two\nend\r\n")
    header = header_of(message)
    for field in HIDDEN_FIELDS.split(b"\r\n")[:-1]:
        assert field.split(b":")[0] + b":" not in header, field
    assert b"blind@rcpt.test" not in message and b"client-chosen" not in message
    assert b"order-42" not in message and b"spring" not in message
    assert header.count(b"X-Layang-Id: ") == 1  # the worker's own


def test_swaks_submission_keeps_dots_once_and_drops_hidden_fields(
    server, smtp_config, trial, config, tmp_path
):
    if shutil.which("swaks") is None:
        if os.environ.get("LAYANG_REQUIRE_TOOLS"):
            pytest.fail("swaks is required here (apt-get install swaks)")
        pytest.skip("swaks is not installed (apt-get install swaks)")
    account, key = trial
    host, port = smtp_config.smtp_host_port
    data = tmp_path / "message.eml"
    data.write_bytes(
        b"From: Trial Shop <" + SANDBOX_SENDER.encode() + b">\r\n"
        b"To: ana@rcpt.test\r\n"
        b"Subject: Dots by swaks\r\n" + HIDDEN_FIELDS + b"\r\n"
        b".\r\n..two\r\n.hidden\r\nend"  # swaks ends the data with its own CRLF
    )
    result = subprocess.run(
        [
            "swaks",
            "--server",
            f"{host}:{port}",
            "--tls",
            "--auth",
            "LOGIN",
            "--auth-user",
            account.name,
            "--auth-password",
            key,
            "--helo",
            "swaks.test",
            "--from",
            SANDBOX_SENDER,
            "--to",
            "ana@rcpt.test",
            "--data",
            str(data),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "250 2.0.0 OK queued as" in result.stdout

    message = captured(config)
    assert message.endswith(b"\r\n\r\n.\r\n..two\r\n.hidden\r\nend\r\n")
    header = header_of(message)
    for name in (b"Bcc:", b"Resent-Bcc:", b"Return-Path:", b"X-Layang-Stream:", b"Idempotency-"):
        assert name not in header, name
    assert b"blind@rcpt.test" not in message and b"client-chosen" not in message


def test_a_non_ascii_local_part_is_submitted_and_relayed_over_smtputf8(
    server, smtp_config, app, upstream, relay_to
):
    live = accounts.create_account("bigshop", live=True)
    key = accounts.create_api_key(live)[1]
    smtp = connect(smtp_config)
    assert smtp.has_extn("smtputf8")
    smtp.login("bigshop", key)
    raw = (
        "From: Big Shop <news@bigshop.test>\r\nTo: Jörg <jörg@faß.de>\r\n"
        "Subject: Grüße\r\n\r\nHallo.\r\n"
    ).encode()
    smtp.sendmail("news@bigshop.test", ["jörg@faß.de"], raw, mail_options=["SMTPUTF8"])
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        smtp.sendmail("news@bigshop.test", ["kunde@☃.de"], raw, mail_options=["SMTPUTF8"])
    assert refused.value.recipients["kunde@☃.de"][0] == 553
    smtp.quit()
    drain(relay_to(upstream))
    assert [r.address for r in Recipient.select()] == ["jörg@xn--fa-hia.de"]
    (received,) = upstream.received
    assert received.rcpt_tos == ["jörg@xn--fa-hia.de"]
    assert any(verb == "SMTPUTF8" for verb, _ in upstream.attempts)
    assert "To: Jörg <jörg@faß.de>".encode() in received.data
