"""Streams (contract 17): transactional mail is claimed before broadcast mail waiting longer;
the stream comes from the API option or the X-Layang-Stream header (removed before relay), is
kept with the message, shown in activity and webhook events, and decides whether an
unsubscribe stops a message."""

from __future__ import annotations

import json
import smtplib
from dataclasses import replace
from email.message import EmailMessage

import pytest

from layang.delivery.queue import claim_due_recipients
from layang.domain import accounts
from layang.models import Recipient, Suppression, Transmission, WebhookDelivery
from layang.submission.server import submission_server
from layang.webhooks.outbox import form_deliveries
from tests.conftest import BACKENDS, drain
from tests.delivery.test_crash import free_port
from tests.submission.test_submission import client_context

URL = "/v1/layang/transmissions"


def send(client, auth, to, stream=None, **options):
    body = {
        "from": {"email": "shop@sender.test"},
        "subject": "Hello",
        "to": [{"email": address} for address in to],
        "bodyText": "Hello.",
    }
    if stream is not None:
        options["stream"] = stream
    if options:
        body["optionsAttributes"] = options
    answer = client.post(URL, headers=auth, json=body)
    assert answer.status_code == 200, answer.get_json()
    return answer.get_json()["transmissionId"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_transactional_mail_is_claimed_before_broadcast_mail_that_waited_longer(client, auth):
    send(client, auth, [f"news{n}@rcpt.test" for n in range(5)], "broadcast")
    send(client, auth, [f"reset{n}@rcpt.test" for n in range(3)])
    claimed = claim_due_recipients("worker-a", 4, 30)
    addresses = [r.address for r in claimed]
    assert addresses[:3] == ["reset0@rcpt.test", "reset1@rcpt.test", "reset2@rcpt.test"]
    assert addresses[3].startswith("news")  # the five were queued in the same millisecond
    priorities = {r.address: r.priority for r in Recipient.select()}
    assert priorities["reset0@rcpt.test"] == 0 and priorities["news4@rcpt.test"] == 1


def test_the_stream_is_kept_and_shown_in_activity_and_webhook_events(client, auth):
    hook = client.post(
        "/v1/layang/webhooks",
        headers=auth,
        json={"url": "https://hooks.example.net/x", "events": ["*"]},
    )
    assert hook.status_code == 201
    news = send(client, auth, ["ana@rcpt.test"], "broadcast")
    legacy = send(client, auth, ["bob@rcpt.test"], transactional=False)
    reset = send(client, auth, ["cy@rcpt.test"])
    streams = {t.id: t.stream for t in Transmission.select()}
    assert streams == {news: "broadcast", legacy: "broadcast", reset: "transactional"}
    items = client.get("/v1/layang/activity", headers=auth).get_json()["items"]
    assert {item["recipient"]: item["stream"] for item in items} == {
        "ana@rcpt.test": "broadcast",
        "bob@rcpt.test": "broadcast",
        "cy@rcpt.test": "transactional",
    }
    form_deliveries()
    events = [e for d in WebhookDelivery.select() for e in json.loads(d.body)["events"]]
    assert {e["recipient"]: e["stream"] for e in events} == {
        "ana@rcpt.test": "broadcast",
        "bob@rcpt.test": "broadcast",
        "cy@rcpt.test": "transactional",
    }


@pytest.fixture
def smtp_config(config):
    return replace(config, smtp_bind=f"127.0.0.1:{free_port()}")


@pytest.fixture
def server(app, smtp_config):
    controller = submission_server(smtp_config)
    controller.start()
    yield controller
    controller.stop()


def smtp_send(config, account, key, recipient, stream):
    message = EmailMessage()
    message["From"] = "shop@sender.test"
    message["To"] = recipient
    message["Subject"] = f"{stream or 'no'} stream"
    if stream:
        message["X-Layang-Stream"] = stream
    message.set_content("Hello.")
    host, port = config.smtp_host_port
    with smtplib.SMTP(host, port, local_hostname="client.test", timeout=10) as smtp:
        smtp.starttls(context=client_context())
        smtp.login(account, key)
        smtp.send_message(message)


def test_the_smtp_header_sets_the_stream_and_is_not_relayed(
    server, smtp_config, upstream, relay_to
):
    account = accounts.create_account("shop", live=True)
    key = accounts.create_api_key(account)[1]
    # An unsubscribe stops broadcast mail only.
    Suppression.create(
        account=account.id, email="ana@rcpt.test", email_key="ana@rcpt.test", reason="unsubscribe"
    )
    smtp_send(smtp_config, "shop", key, "ana@rcpt.test", "broadcast")
    smtp_send(smtp_config, "shop", key, "ana@rcpt.test", None)
    smtp_send(smtp_config, "shop", key, "bob@rcpt.test", "broadcast")
    drain(relay_to(upstream))
    by_subject = {
        (t.subject, r.address): (t.stream, r.status)
        for t in Transmission.select()
        for r in t.recipients
    }
    assert by_subject == {
        ("broadcast stream", "ana@rcpt.test"): ("broadcast", "Suppressed"),
        ("no stream", "ana@rcpt.test"): ("transactional", "Delivery"),
        ("broadcast stream", "bob@rcpt.test"): ("broadcast", "Delivery"),
    }
    assert len(upstream.received) == 2
    for received in upstream.received:
        assert b"x-layang-stream" not in received.data.lower()


def test_a_bad_smtp_stream_header_is_refused_naming_it(server, smtp_config):
    account = accounts.create_account("shop", live=True)
    key = accounts.create_api_key(account)[1]
    with pytest.raises(smtplib.SMTPDataError) as refused:
        smtp_send(smtp_config, "shop", key, "ana@rcpt.test", "bulk")
    assert refused.value.smtp_code == 554
    assert refused.value.smtp_error.decode() == (
        "5.6.0 X-Layang-Stream: 'bulk' is not a stream: use transactional or broadcast."
    )
    assert Transmission.select().count() == 0


def test_an_unsubscribe_while_smtp_broadcast_mail_waits_stops_it_there(
    server, smtp_config, upstream, relay_to
):
    account = accounts.create_account("shop", live=True)
    key = accounts.create_api_key(account)[1]
    smtp_send(smtp_config, "shop", key, "ana@rcpt.test", "broadcast")
    smtp_send(smtp_config, "shop", key, "ana@rcpt.test", None)
    Suppression.create(
        account=account.id, email="ana@rcpt.test", email_key="ana@rcpt.test", reason="unsubscribe"
    )
    drain(relay_to(upstream))
    statuses = {t.stream: t.recipients[0].status for t in Transmission.select()}
    assert statuses == {"broadcast": "Suppressed", "transactional": "Delivery"}
    assert len(upstream.received) == 1
