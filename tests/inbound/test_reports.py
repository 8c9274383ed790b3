"""The way back, over real SMTP in both directions: a message goes out through the API to a real
upstream server with its VERP return path; reports sent to that address over SMTP to the
inbound server show up in the Activity API."""

from __future__ import annotations

import json
import signal
import smtplib
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from email.message import EmailMessage
from pathlib import Path

import pytest

from layang.config import Config
from layang.inbound.server import InboundController, inbound_server
from layang.mail.return_path import InvalidReturnPath, ReturnPaths
from tests.conftest import BACKENDS, drain
from tests.delivery.test_crash import ROOT, free_port

URL = "/v1/layang/transmissions"
RECIPIENT = "ana@rcpt.test"


@pytest.fixture
def inbound(config: Config, app) -> Iterator[InboundController]:
    """The inbound server on a free port, sharing the test's database with ``app``."""
    server = inbound_server(replace(config, inbound_bind=f"127.0.0.1:{free_port()}"))
    server.start()
    yield server
    server.stop()


def send_and_relay(client, auth, upstream, relay_to, sender="shop@sender.test") -> tuple[str, str]:
    """Send one message through the API and relay it: (its record id, the VERP address the
    upstream server got as MAIL FROM)."""
    response = client.post(
        URL,
        json={
            "from": {"email": sender},
            "subject": "Your order",
            "to": [{"email": RECIPIENT}],
            "bodyText": "Thanks.",
        },
        headers=auth,
    )
    assert response.status_code == 200, response.get_json()
    tid = response.get_json()["transmissionId"]
    drain(relay_to(upstream))
    received = upstream.received[-1]
    (record,) = client.get(f"{URL}/{tid}", headers=auth).get_json()["recipients"]
    return record["id"], received.mail_from


def deliver(server: InboundController, rcpt: str, data: bytes, mail_from: str = "") -> None:
    with smtplib.SMTP(server.hostname, server.port, local_hostname="mx.rcpt.test") as smtp:
        smtp.sendmail(mail_from, [rcpt], data)


def record(client, auth, record_id: str) -> dict:
    items = client.get(f"/v1/layang/activity?recipient={RECIPIENT}", headers=auth).get_json()
    return next(item for item in items["items"] if item["id"] == record_id)


def dsn(verp: str, action: str, status: str, diagnostic: str) -> bytes:
    return (
        "From: Mail Delivery Subsystem <MAILER-DAEMON@mx.rcpt.test>\r\n"
        f"To: {verp}\r\n"
        "Subject: Delivery Status Notification\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b1"\r\n'
        "\r\n"
        "--b1\r\n"
        "Content-Type: text/plain\r\n"
        "\r\n"
        "Your message could not be delivered.\r\n"
        "--b1\r\n"
        "Content-Type: message/delivery-status\r\n"
        "\r\n"
        "Reporting-MTA: dns; mx.rcpt.test\r\n"
        "Arrival-Date: Mon, 23 Nov 2026 10:00:00 +0000\r\n"
        "\r\n"
        f"Final-Recipient: rfc822; {RECIPIENT}\r\n"
        f"Action: {action}\r\n"
        f"Status: {status}\r\n"
        "Remote-MTA: dns; store.rcpt.test\r\n"
        f"Diagnostic-Code: smtp; {diagnostic}\r\n"
        "\r\n"
        "--b1\r\n"
        "Content-Type: text/rfc822-headers\r\n"
        "\r\n"
        "From: shop@sender.test\r\n"
        "Subject: Your order\r\n"
        "--b1--\r\n"
    ).encode()


def test_the_envelope_sender_is_a_signed_verp_address_naming_the_record(
    client, auth, upstream, relay_to, config
):
    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    local, _, domain = verp.partition("@")
    assert domain == "bounces.127.0.0.1"  # LAYANG_BOUNCE_DOMAIN's default, from the public URL
    assert local.startswith("b+") and local == local.lower() and len(local) == 44
    assert ReturnPaths(config.secret_key, domain).read_address(verp) == record_id
    # The same token in the message, for complaints whose original lost its Return-Path.
    assert upstream.received[-1].message["X-Layang-Id"] == local[2:]
    with pytest.raises(InvalidReturnPath):
        ReturnPaths("another-secret", domain).read_address(verp)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_dsn_turns_a_delivered_record_into_a_hard_bounce(
    client, auth, upstream, relay_to, inbound
):
    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    assert record(client, auth, record_id)["status"] == "Delivery"
    diagnostic = (
        "550-5.1.1 The email account that you tried to reach does not exist. "
        "Please try double-checking the recipient's email address"
    )
    deliver(inbound, verp, dsn(verp, "failed", "5.1.1", diagnostic))
    shown = record(client, auth, record_id)
    assert shown["status"] == "Bounce"
    bounce = shown["events"][-1]
    assert bounce["status"] == "Bounce"
    assert bounce["bounceClass"] == "hard"
    assert bounce["detail"]["diagnostic"] == diagnostic
    assert bounce["detail"]["status"] == "5.1.1"
    assert bounce["detail"]["reportedBy"] == "mx.rcpt.test"
    assert bounce["detail"]["source"] == "report"
    assert [e["status"] for e in shown["events"]] == ["Injection", "Delivery", "Bounce"]


def test_a_delayed_dsn_adds_a_soft_delay_and_keeps_the_delivery(
    client, auth, upstream, relay_to, inbound
):
    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    diagnostic = "452 4.2.2 The email account that you tried to reach is over quota."
    deliver(inbound, verp, dsn(verp, "delayed", "4.2.2", diagnostic))
    shown = record(client, auth, record_id)
    assert shown["status"] == "Delivery"
    delay = shown["events"][-1]
    assert delay["status"] == "Delay"
    assert delay["bounceClass"] == "soft"
    assert delay["detail"]["status"] == "4.2.2"
    assert delay["detail"]["diagnostic"] == diagnostic


def arf(original_headers: str, to: str) -> bytes:
    return (
        "From: Yahoo! Mail AntiSpam Feedback <feedback@arf.mail.yahoo.com>\r\n"
        f"To: {to}\r\n"
        "Subject: FW: Your order\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=feedback-report; boundary="arf"\r\n'
        "\r\n"
        "--arf\r\n"
        "Content-Type: text/plain\r\n"
        "\r\n"
        "This is an email abuse report.\r\n"
        "--arf\r\n"
        "Content-Type: message/feedback-report\r\n"
        "\r\n"
        "Feedback-Type: abuse\r\n"
        "User-Agent: Yahoo!-Mail-Feedback/2.0\r\n"
        "Version: 1\r\n"
        "Reported-Domain: sender.test\r\n"
        "\r\n"
        "--arf\r\n"
        "Content-Type: message/rfc822\r\n"
        "\r\n"
        f"{original_headers}"
        "From: shop@sender.test\r\n"
        "To: redacted@rcpt.test\r\n"
        "Subject: Your order\r\n"
        "\r\n"
        "Thanks.\r\n"
        "--arf--\r\n"
    ).encode()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_complaint_to_fbl_finds_its_record_by_the_originals_return_path(
    client, auth, upstream, relay_to, inbound
):
    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    deliver(inbound, "fbl@bounces.127.0.0.1", arf(f"Return-Path: <{verp}>\r\n", "fbl@x"))
    shown = record(client, auth, record_id)
    assert shown["status"] == "Delivery"
    complaint = shown["events"][-1]
    assert complaint["status"] == "Complaint"
    assert complaint["detail"]["feedbackType"] == "abuse"
    assert complaint["detail"]["reportedBy"] == "arf.mail.yahoo.com"
    assert complaint["detail"]["source"] == "report"
    listed = client.get("/v1/layang/activity?status=Complaint", headers=auth).get_json()
    assert [item["id"] for item in listed["items"]] == [record_id]


def test_a_complaint_without_return_path_is_found_by_the_signed_header(
    client, auth, upstream, relay_to, inbound
):
    record_id, _ = send_and_relay(client, auth, upstream, relay_to)
    token = upstream.received[-1].message["X-Layang-Id"]
    deliver(inbound, "abuse@bounces.127.0.0.1", arf(f"X-Layang-Id: {token}\r\n", "abuse@x"))
    assert record(client, auth, record_id)["events"][-1]["status"] == "Complaint"


def test_a_complaint_with_a_forged_header_is_kept_unrecognised(
    client, auth, upstream, relay_to, inbound, config
):
    record_id, _ = send_and_relay(client, auth, upstream, relay_to)
    forged = ReturnPaths("not-our-secret", "x").token(record_id)
    deliver(inbound, "fbl@bounces.127.0.0.1", arf(f"X-Layang-Id: {forged}\r\n", "fbl@x"))
    assert record(client, auth, record_id)["events"][-1]["status"] == "Delivery"
    listed = inbound_list(config)
    assert listed[0]["reason"] == "the report names no email sent here"


QMAIL = """\
Hi. This is the qmail-send program at mx.rcpt.test.
I'm afraid I wasn't able to deliver your message to the following addresses.
This is a permanent error; I've given up. Sorry it didn't work out.

<ana@rcpt.test>:
Sorry, no mailbox here by that name. (#5.1.1)

--- Below this line is a copy of the message.

From: shop@sender.test
Subject: Your order
"""

EXIM = """\
This message was created automatically by mail delivery software.

A message that you sent could not be delivered to one or more of its
recipients. This is a permanent error. The following address(es) failed:

  ana@rcpt.test
    host store.rcpt.test [192.0.2.7]
    SMTP error from remote mail server after RCPT TO:<ana@rcpt.test>:
    550 5.1.1 <ana@rcpt.test>: Recipient address rejected: User unknown in local recipient table
"""


@pytest.mark.parametrize(
    ("sender", "text", "headers", "diagnostic", "status"),
    [
        (
            "MAILER-DAEMON@mx.rcpt.test",
            QMAIL,
            {"Subject": "failure notice"},
            "Sorry, no mailbox here by that name. (#5.1.1)",
            "5.1.1",
        ),
        (
            "Mail Delivery System <Mailer-Daemon@mx.rcpt.test>",
            EXIM,
            {
                "Subject": "Mail delivery failed: returning message to sender",
                "X-Failed-Recipients": RECIPIENT,
            },
            "550 5.1.1 <ana@rcpt.test>: Recipient address rejected: User unknown in local "
            "recipient table",
            "5.1.1",
        ),
    ],
    ids=["qmail", "exim"],
)
def test_a_non_standard_bounce_is_read_too(
    client, auth, upstream, relay_to, inbound, sender, text, headers, diagnostic, status
):
    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    bounce = EmailMessage()
    bounce["From"] = sender
    bounce["To"] = verp
    for name, value in headers.items():
        bounce[name] = value
    bounce.set_content(text)
    deliver(inbound, verp, bounce.as_bytes())
    shown = record(client, auth, record_id)
    assert shown["status"] == "Bounce"
    event = shown["events"][-1]
    assert event["bounceClass"] == "hard"
    assert event["detail"]["diagnostic"] == diagnostic
    assert event["detail"]["status"] == status
    assert event["detail"]["reportedBy"] == "mx.rcpt.test"


def test_the_return_path_is_the_verified_domains_own(
    client, auth, upstream, relay_to, account, config
):
    from layang.db import write_transaction
    from layang.models import VERIFIED, SendingDomain

    with write_transaction():
        SendingDomain.create(
            account=account.id,
            domain="sender.test",
            return_path_domain="rp.sender.test",
            status=VERIFIED,
        )
    _, verp = send_and_relay(client, auth, upstream, relay_to, sender="shop@mail.sender.test")
    assert verp.endswith("@rp.sender.test")


@pytest.mark.parametrize(
    "address",
    [
        "b+aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@bounces.127.0.0.1",  # forged
        "someone@bounces.127.0.0.1",
        "fbl@elsewhere.test",
        "b+short@bounces.127.0.0.1",
    ],
)
def test_anything_but_a_valid_verp_or_feedback_address_is_refused_at_rcpt(inbound, address):
    with smtplib.SMTP(inbound.hostname, inbound.port, local_hostname="mx.rcpt.test") as smtp:
        smtp.ehlo()
        smtp.mail("")
        code, text = smtp.rcpt(address)
    assert (code, text[:5]) == (550, b"5.1.1")


def test_a_verp_address_of_a_deleted_record_is_refused(client, auth, upstream, relay_to, inbound):
    from layang.models import Recipient

    record_id, verp = send_and_relay(client, auth, upstream, relay_to)
    Recipient.delete().where(Recipient.id == record_id).execute()
    with smtplib.SMTP(inbound.hostname, inbound.port, local_hostname="mx.rcpt.test") as smtp:
        smtp.ehlo()
        smtp.mail("")
        assert smtp.rcpt(verp)[0] == 550


def inbound_list(config: Config, *args: str) -> list[dict]:
    env = {
        "PATH": "/usr/bin:/bin",
        "LAYANG_DATA_DIR": str(config.data_dir),
        "LAYANG_DATABASE_URL": config.database_url,
        "LAYANG_SECRET_KEY": config.secret_key,
    }
    done = subprocess.run(
        [sys.executable, "-m", "layang", "inbound", "list", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


def test_unrecognised_mail_is_accepted_and_listed_newest_first(
    client, auth, upstream, relay_to, inbound, config
):
    _, verp = send_and_relay(client, auth, upstream, relay_to)
    # (An "Out of office" reply is an AutoReply now: see test_report_forms.)
    for subject in ("A question", "Re: Your order"):
        reply = EmailMessage()
        reply["From"] = "ana@rcpt.test"
        reply["To"] = verp
        reply["Subject"] = subject
        reply.set_content("Which size was it?")
        deliver(inbound, verp, reply.as_bytes(), mail_from="ana@rcpt.test")
    listed = inbound_list(config, "--limit", "1")
    assert len(listed) == 1
    (newest,) = listed
    assert newest["subject"] == "Re: Your order"
    assert newest["mailFrom"] == "ana@rcpt.test"
    assert newest["rcptTo"] == [verp]
    assert newest["reason"] == "not a delivery status or feedback report"
    assert newest["size"] > 0
    assert [e["subject"] for e in inbound_list(config)] == ["Re: Your order", "A question"]


def test_a_message_over_the_size_limit_is_refused(config, app):
    big = b"Subject: big\r\n\r\n" + b"x" * (11 * 1024 * 1024)
    inbound = inbound_server(
        replace(config, inbound_bind=f"127.0.0.1:{free_port()}", inbound_max_mb=10)
    )
    inbound.start()
    with (
        smtplib.SMTP(inbound.hostname, inbound.port, local_hostname="mx.rcpt.test") as smtp,
        pytest.raises(smtplib.SMTPSenderRefused) as refused,
    ):
        smtp.sendmail("", ["fbl@bounces.127.0.0.1"], big)
    inbound.stop()
    assert refused.value.smtp_code == 552


def test_layang_run_starts_the_inbound_server_and_stops_it_on_ctrl_c(config, tmp_path: Path):
    from tests.delivery.test_crash import process_env, start, stop, wait_until

    inbound_port = free_port()
    env = process_env(
        config,
        LAYANG_HTTP_BIND=f"127.0.0.1:{free_port()}",
        LAYANG_SMTP_BIND=f"127.0.0.1:{free_port()}",
        LAYANG_INBOUND_BIND=f"127.0.0.1:{inbound_port}",
        LAYANG_PUBLIC_URL="http://layang.test",
    )
    log_path = tmp_path / "run.log"
    server = start(["run"], env, log_path)
    try:
        wait_until(
            lambda: "inbound smtp listening" in log_path.read_text(), 30, "no inbound server"
        )
        with smtplib.SMTP("127.0.0.1", inbound_port, local_hostname="mx.rcpt.test") as smtp:
            code, banner = smtp.ehlo()
            assert code == 250 and b"AUTH" not in banner
            smtp.mail("")
            assert smtp.rcpt("abuse@bounces.layang.test")[0] == 250
            assert smtp.rcpt("postmaster@bounces.layang.test")[0] == 550
        server.send_signal(signal.SIGINT)
        assert server.wait(30) == 0
        assert "layang stopped" in log_path.read_text()
    finally:
        stop(server)


def test_no_one_can_put_their_own_x_layang_id_in_a_message(client, auth):
    from layang.mail.submitted import prepare_submission

    forged = "a" * 42
    response = client.post(
        URL,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "S",
            "to": [{"email": RECIPIENT}],
            "bodyText": "x",
            "headers": [{"name": "X-Layang-Id", "value": forged}],
        },
        headers=auth,
    )
    assert response.status_code == 400
    assert "X-Layang-Id" in response.get_json()["message"]
    submitted = prepare_submission(
        f"From: shop@sender.test\r\nX-Layang-Id: {forged}\r\nSubject: S\r\n\r\nx\r\n".encode(),
        "01jdz4aaaaaaaaaaaaaaaaaaaa",
        0,
        "shop@sender.test",
    )
    assert forged.encode() not in submitted.raw


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_bounce_reported_before_the_delivery_is_recorded_stays_the_final_state(
    client, auth, upstream, relay_to, inbound
):
    response = client.post(
        URL,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "Your order",
            "to": [{"email": RECIPIENT}],
            "bodyText": "Thanks.",
        },
        headers=auth,
    )
    assert response.status_code == 200
    # The remote server accepts the message and reports its bounce at once: the report
    # arrives while the worker still waits for the reply to DATA.
    upstream.stall()
    worker = relay_to(upstream)
    relaying = threading.Thread(target=drain, args=(worker,))
    relaying.start()
    try:
        assert upstream.wait_stalled()
        verp = next(argument for verb, argument in upstream.attempts if verb == "MAIL")
        deliver(inbound, verp, dsn(verp, "failed", "5.1.1", "550 5.1.1 No such user"))
    finally:
        upstream.release()
        relaying.join(timeout=30)
    items = client.get(f"/v1/layang/activity?recipient={RECIPIENT}", headers=auth).get_json()
    (shown,) = items["items"]
    assert shown["status"] == "Bounce"
    events = {event["status"]: event for event in shown["events"]}
    assert {"Delivery", "Bounce"} <= set(events)
    # Each event at its own time: the report came before the delivery was recorded.
    assert events["Bounce"]["timestamp"] <= events["Delivery"]["timestamp"]
    entry = client.get(f"/v1/layang/suppressions/{RECIPIENT}", headers=auth)
    assert entry.status_code == 200 and entry.get_json()["reason"] == "hard_bounce"
