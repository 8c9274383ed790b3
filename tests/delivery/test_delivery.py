"""From POST to the bytes the upstream server received, with each delivery outcome recorded."""

from __future__ import annotations

import base64
import re
import time
from dataclasses import replace

import pytest

from layang.domain.records import get_record
from layang.models import Event, Recipient
from tests.conftest import BACKENDS, b64, drain

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

URL = "/v1/layang/transmissions"
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


def send(client, auth, **fields):
    body = {
        "from": {"email": "shop@sender.test", "name": "Shop"},
        "subject": "Your order",
        "to": [{"email": "ana@rcpt.test", "name": "Ana"}],
    }
    body.update(fields)
    if "bodyText" not in body and "bodyHtml" not in body:
        body["bodyText"] = "Thanks for your order."
    response = client.post(URL, json=body, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["transmissionId"]


def events(transmission_id, address):
    recipient = Recipient.get(
        Recipient.transmission == transmission_id, Recipient.address == address
    )
    record = get_record(recipient.account, recipient.id)  # as the Activity API shows it
    return [event.status for event in record.events]


def test_text_only(client, auth, upstream, relay_to):
    tid = send(
        client,
        auth,
        replyTo=[{"email": "help@sender.test", "name": "Help"}],
        metadata={"order": "42"},
    )
    drain(relay_to(upstream))
    (received,) = upstream.received
    assert received.mail_from.startswith("b+")  # its VERP return path (tests/inbound)
    assert received.mail_from.endswith("@bounces.127.0.0.1")
    assert received.rcpt_tos == ["ana@rcpt.test"]
    msg = received.message
    assert msg["From"] == "Shop <shop@sender.test>"
    assert msg["To"] == "Ana <ana@rcpt.test>"
    assert msg["Reply-To"] == "Help <help@sender.test>"
    assert msg["Subject"] == "Your order"
    assert msg["Message-ID"] == f"<{tid}@sender.test>"
    assert msg["Date"]
    assert msg.get_content_type() == "text/plain"
    assert msg.get_content().strip() == "Thanks for your order."
    assert b"order" not in received.data.split(b"\r\n\r\n", 1)[0].lower().replace(
        b"your order", b""
    )  # metadata stays out of the message
    assert events(tid, "ana@rcpt.test") == ["Injection", "Delivery"]


def test_html_only(client, auth, upstream, relay_to):
    send(client, auth, bodyHtml="<html><body><h1>Hi</h1></body></html>")
    drain(relay_to(upstream))
    msg = upstream.received[0].message
    # A text alternative is made from the HTML (see tests/mail/test_text_part.py).
    assert msg.get_content_type() == "multipart/alternative"
    assert "<h1>Hi</h1>" in msg.get_body(("html",)).get_content()
    assert msg.get_body(("plain",)).get_content().strip() == "Hi"


def test_text_html_and_attachments(client, auth, upstream, relay_to):
    send(
        client,
        auth,
        bodyText="plain",
        bodyHtml="<p>rich</p>",
        attachments=[
            {"mimeType": "image/png", "filename": "pixel.png", "value": b64(PNG)},
            {"filename": "notes.txt", "value": b64("naïve\n".encode())},
        ],
    )
    drain(relay_to(upstream))
    msg = upstream.received[0].message
    assert msg.get_content_type() == "multipart/mixed"
    body = msg.get_body(("plain",))
    assert body.get_content().strip() == "plain"
    assert msg.get_body(("html",)).get_content().strip() == "<p>rich</p>"
    attachments = list(msg.iter_attachments())
    assert [a.get_filename() for a in attachments] == ["pixel.png", "notes.txt"]
    assert attachments[0].get_content_type() == "image/png"
    assert attachments[0].get_content() == PNG
    assert attachments[1].get_content_type() == "text/plain"


def test_options_attributes(client, auth, upstream, relay_to):
    send(
        client,
        auth,
        bodyHtml='<p><a href="https://shop.test/o/1">order</a></p>',
        optionsAttributes={"openTracking": False, "clickTracking": False, "transactional": True},
    )
    drain(relay_to(upstream))
    assert b'href="https://shop.test/o/1"' in upstream.received[0].data


def test_custom_headers(client, auth, upstream, relay_to):
    send(
        client,
        auth,
        headers=[
            {"name": "X-Order-Id", "value": "42"},
            {"name": "List-Unsubscribe", "value": "<mailto:u@sender.test>"},
            {"name": "X-Note", "value": "Grüße"},
        ],
    )
    drain(relay_to(upstream))
    msg = upstream.received[0].message
    assert msg["X-Order-Id"] == "42"
    assert msg["List-Unsubscribe"] == "<mailto:u@sender.test>"
    assert msg["X-Note"] == "Grüße"


def test_cc(client, auth, upstream, relay_to):
    tid = send(
        client, auth, cc=[{"email": "c1@rcpt.test", "name": "C One"}, {"email": "c2@rcpt.test"}]
    )
    drain(relay_to(upstream))
    # One transaction each: every recipient has its own return path.
    received = upstream.received
    assert sorted(r for m in received for r in m.rcpt_tos) == [
        "ana@rcpt.test",
        "c1@rcpt.test",
        "c2@rcpt.test",
    ]
    assert len({m.mail_from for m in received}) == 3
    assert {m.message["Cc"] for m in received} == {"C One <c1@rcpt.test>, c2@rcpt.test"}
    assert events(tid, "c2@rcpt.test") == ["Injection", "Delivery"]


def test_bcc_receives_but_appears_in_no_header(client, auth, upstream, relay_to):
    tid = send(
        client,
        auth,
        cc=[{"email": "c@rcpt.test"}],
        bcc=[{"email": "hidden1@secret.test"}, {"email": "hidden2@secret.test"}],
    )
    drain(relay_to(upstream))
    received = upstream.received
    assert {r for m in received for r in m.rcpt_tos} >= {
        "hidden1@secret.test",
        "hidden2@secret.test",
    }
    assert all(b"secret.test" not in m.data for m in received)
    assert all(m.message["Bcc"] is None for m in received)
    assert events(tid, "hidden1@secret.test") == ["Injection", "Delivery"]
    kinds = {r.address: r.recipient_type for r in Recipient.select()}
    assert kinds["hidden2@secret.test"] == "bcc"


def test_non_ascii_names_subject_and_bodies(client, auth, upstream, relay_to):
    send(
        client,
        auth,
        **{"from": {"email": "shop@sender.test", "name": "Zoë Ærøskøbing"}},
        to=[{"email": "ana@rcpt.test", "name": 'Ana, "the" Tester'}],
        subject="Grüße 🎉 " + "long subject " * 10,
        bodyText="Ünïcödé body ✓\n" * 3,
        bodyHtml="<p>Ünïcödé ✓</p>",
    )
    drain(relay_to(upstream))
    received = upstream.received[0]
    received.data.decode("ascii")  # 7-bit clean on the wire: every header and part is encoded
    msg = received.message
    assert str(msg["From"]) == "Zoë Ærøskøbing <shop@sender.test>"
    assert msg["To"].addresses[0].display_name == 'Ana, "the" Tester'
    assert msg["Subject"] == "Grüße 🎉 " + "long subject " * 10
    text = msg.get_body(("plain",)).get_content().replace("\r\n", "\n")  # mail line ends
    assert text == "Ünïcödé body ✓\n" * 3
    assert "Ünïcödé ✓" in msg.get_body(("html",)).get_content()
    assert all(len(line) <= 998 for line in received.data.split(b"\r\n"))


def test_international_domain_goes_out_as_idna(client, auth, upstream, relay_to):
    send(client, auth, to=[{"email": "jose@bücher.example"}])
    drain(relay_to(upstream))
    assert upstream.received[0].rcpt_tos == ["jose@xn--bcher-kva.example"]


def test_temporary_failures_are_retried_then_delivered(client, auth, upstream, relay_to):
    upstream.script_rcpt("ana@rcpt.test", "451 4.3.0 Try again later", "451 4.3.0 Try again later")
    tid = send(client, auth)
    worker = relay_to(upstream)
    drain(worker, until=lambda: len(upstream.received) == 1)
    assert events(tid, "ana@rcpt.test") == ["Injection", "Delay", "Delay", "Delivery"]
    rcpts = [arg for verb, arg in upstream.attempts if verb == "RCPT"]
    assert len(rcpts) == 3
    recipient = Recipient.get()
    assert recipient.status == "Delivery" and recipient.attempts == 3
    delays = list(Event.select().where(Event.status == "Delay"))
    assert "451 4.3.0 Try again later" in delays[0].detail
    assert recipient.next_attempt_at is None


def test_backoff_doubles(client, auth, upstream, relay_to):
    upstream.script_rcpt("ana@rcpt.test", *["451 4.3.0 later"] * 3)
    send(client, auth)
    worker = relay_to(upstream, retry_base_seconds=0.2)
    retry_delays = []
    for _ in range(3):
        drain(worker, until=lambda: Recipient.get().attempts > len(retry_delays))
        recipient = Recipient.get()
        retry_delays.append((recipient.next_attempt_at - recipient.updated_at) / 1000)
    base = 0.2
    for n, delay in enumerate(retry_delays):
        # Timestamps are whole milliseconds: the lower bound may be undercut by one.
        assert base * 2**n * 0.75 - 0.001 <= delay <= base * 2**n * 1.25 + 0.01, retry_delays


def test_permanent_failure_bounces_after_one_attempt(client, auth, upstream, relay_to):
    upstream.script_rcpt("ana@rcpt.test", "550 5.1.1 No such user")
    tid = send(client, auth, cc=[{"email": "ok@rcpt.test"}])
    worker = relay_to(upstream)
    drain(worker)
    time.sleep(0.2)
    drain(worker)
    assert events(tid, "ana@rcpt.test") == ["Injection", "Bounce"]
    assert events(tid, "ok@rcpt.test") == ["Injection", "Delivery"]
    assert [arg for verb, arg in upstream.attempts if verb == "RCPT"].count("ana@rcpt.test") == 1
    bounce = Event.get(Event.status == "Bounce")
    assert "550 5.1.1 No such user" in bounce.detail
    assert upstream.received[0].rcpt_tos == ["ok@rcpt.test"]


def test_a_data_rejection_applies_to_the_recipient_of_its_transaction(
    client, auth, upstream, relay_to
):
    # Each recipient has a transaction of its own (its own return path): a refused message
    # bounces the recipient it was for, not the others.
    upstream.script_data("554 5.6.0 Message rejected")
    tid = send(client, auth, cc=[{"email": "c@rcpt.test"}])
    drain(relay_to(upstream))
    outcomes = sorted([events(tid, "ana@rcpt.test"), events(tid, "c@rcpt.test")])
    assert outcomes == [["Injection", "Bounce"], ["Injection", "Delivery"]]


def test_undeliverable_until_expiry_bounces_as_expired(client, auth, upstream, relay_to):
    upstream.script_rcpt("ana@rcpt.test", *["451 4.3.0 later"] * 50)
    tid = send(client, auth)
    worker = relay_to(upstream, max_delivery_seconds=0.5, retry_base_seconds=0.1)
    drain(worker, until=lambda: Recipient.get().status == "Bounce")
    statuses = events(tid, "ana@rcpt.test")
    assert statuses[0] == "Injection" and statuses[-1] == "Bounce"
    assert set(statuses[1:-1]) == {"Delay"}
    assert '"reason": "expired"' in Event.get(Event.status == "Bounce").detail


def test_an_unreachable_upstream_is_tried_once_per_message_not_once_per_recipient(
    client, auth, upstream, relay_to
):
    upstream.stop()
    send(client, auth, cc=[{"email": "c1@rcpt.test"}, {"email": "c2@rcpt.test"}])
    # One session at a time: the copies queue behind the first, whose refusal settles them.
    worker = relay_to(upstream, worker_connections=1)
    smarthost, calls = worker.router.configured.transport, []

    class CountingSmarthost:
        async def open(self, job):
            calls.append(job.recipient.address)
            return await smarthost.open(job)

        def refusal(self, session, job):
            return smarthost.refusal(session, job)

        def close(self):
            smarthost.close()

    worker.router.configured = replace(worker.router.configured, transport=CountingSmarthost())
    worker.run_once()
    assert len(calls) == 1  # each recipient has its own transaction, but one refusal is enough
    assert {r.status for r in Recipient.select()} == {"Delay"}
    assert all("refused" in e.detail for e in Event.select().where(Event.status == "Delay"))


def test_unreachable_upstream_is_a_delay(client, auth, upstream, relay_to):
    url = upstream.url
    upstream.stop()
    send(client, auth)
    worker = relay_to(upstream)
    worker.run_once()
    recipient = Recipient.get()
    assert recipient.status == "Delay"
    assert recipient.next_attempt_at is not None
    assert "Delay" in [e.status for e in Event.select()]
    assert url  # the server is gone; the reply says why
    assert "refused" in Event.get(Event.status == "Delay").detail.lower()


def test_starttls_is_used_when_offered(client, auth, tls_upstream, relay_to):
    send(client, auth)
    drain(relay_to(tls_upstream))
    assert tls_upstream.received[0].tls is True


def test_connection_is_reused_across_messages(client, auth, upstream, relay_to):
    for _ in range(3):
        send(client, auth)
    drain(relay_to(upstream, worker_batch_size=1))
    assert len(upstream.received) == 3
    assert upstream.connections == 1


def test_retry_sends_the_same_bytes(client, auth, upstream, relay_to):
    upstream.script_data("451 4.3.0 later")
    send(client, auth, bodyText="a", bodyHtml="<p>a</p>")
    worker = relay_to(upstream)
    drain(
        worker, until=lambda: len(upstream.received) >= 1 and Recipient.get().status == "Delivery"
    )
    assert len(upstream.data_seen) == 2
    assert upstream.data_seen[0] == upstream.data_seen[1]


@pytest.mark.parametrize("kind", ["capture"])
def test_capture_sink_writes_eml(client, auth, config, kind):
    from layang.delivery.worker import Worker

    tid = send(client, auth, bcc=[{"email": "b@rcpt.test"}])
    drain(Worker(config))
    files = sorted((config.data_dir / "outbox").glob("*.eml"))
    assert len(files) == 2
    contents = [f.read_bytes() for f in files]
    assert any(
        re.match(
            rb"Return-Path: <b\+[a-z2-7]{42}@bounces\.127\.0\.0\.1>\r\nDelivered-To: b@rcpt", c
        )
        for c in contents
    )
    assert all(f"Message-ID: <{tid}@sender.test>".encode() in c for c in contents)
