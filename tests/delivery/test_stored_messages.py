"""What the outbox stores: the typed message round-trips, mail queued by an earlier release in
the first stored format is still delivered, a large message is stored in chunks, whole or not
at all, and delivered intact, and a message that cannot be built bounces at once."""

from __future__ import annotations

import base64
import json
import os
import re

import peewee
import pytest

from layang.clock import now_ms
from layang.ids import new_id
from layang.mail.message import (
    PAYLOAD_VERSION,
    Attachment,
    Header,
    Mailbox,
    OutgoingMessage,
)
from layang.mail.outbox import PAYLOAD_CHUNK_CHARS, PAYLOAD_CHUNK_FIELDS, queue_message
from layang.models import Event, PayloadChunk, Recipient, Transmission
from tests.conftest import BACKENDS, drain

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

DATE_MS = 1_763_000_000_000  # Thu, 13 Nov 2025 02:13:20 +0000

# A payload exactly as the first releases stored it: the API's camelCase request, normalised.
FIRST_FORMAT = {
    "from": {"email": "shop@sender.test", "name": "Shop"},
    "subject": "Stored before the upgrade",
    "to": [{"email": "ana@rcpt.test", "name": "Ana"}],
    "cc": [{"email": "ben@rcpt.test"}],
    "bcc": [{"email": "cy@rcpt.test"}],
    "replyTo": [{"email": "help@sender.test"}],
    "bodyText": "Plain words.",
    "bodyHtml": '<html><body><a href="https://shop.test/o/1">Order</a></body></html>',
    "headers": [{"name": "X-Campaign", "value": "autumn"}],
    "attachments": [
        {"filename": "note.txt", "mimeType": "text/plain", "value": "aGVsbG8g\nd29ybGQ="}
    ],
    "template": {"id": "welcome", "version": 3},
    "options": {"openTracking": True, "clickTracking": True},
    "date": DATE_MS,
}


def store(account, payload: dict, recipients: list[tuple[str, str]]) -> str:
    """Put a transmission straight into the outbox, as an earlier release left it."""
    tid = new_id()
    created = now_ms()
    Transmission.create(
        id=tid,
        account=account.id,
        created_at=created,
        source="api",
        mail_from=payload["from"]["email"],
        from_header=json.dumps(payload["from"]),
        subject=payload["subject"],
        message_id=f"<{tid}@sender.test>",
        metadata="{}",
        payload=json.dumps(payload),
    )
    for address, kind in recipients:
        Recipient.create(
            transmission=tid,
            account=account.id,
            address=address,
            recipient_type=kind,
            created_at=created,
            updated_at=created,
            next_attempt_at=created,
        )
    return tid


def test_a_message_round_trips_through_its_stored_form(app):
    message = OutgoingMessage(
        sender=Mailbox("shop@sender.test", "Shop, Inc."),
        subject="Héllo",
        to=(Mailbox("ana@rcpt.test", "Ana"), Mailbox("bo@rcpt.test")),
        cc=(Mailbox("cc@rcpt.test"),),
        bcc=(Mailbox("bcc@rcpt.test"),),
        reply_to=(Mailbox("help@sender.test"),),
        text="t",
        html="<p>h</p>",
        attachments=(Attachment("a.png", "iVBORw0KGgo=", "image/png"), Attachment("b", "eA==")),
        headers=(Header("X-One", "1"),),
        open_tracking=True,
        click_tracking=False,
        transactional=False,
        date_ms=DATE_MS,
    )
    stored = json.loads(json.dumps(message.to_payload()))
    assert stored["v"] == PAYLOAD_VERSION
    assert OutgoingMessage.from_payload(stored) == message
    plain = OutgoingMessage(Mailbox("a@b.test"), "s", to=(Mailbox("c@d.test"),), text="x")
    assert OutgoingMessage.from_payload(json.loads(json.dumps(plain.to_payload()))) == plain


def test_mail_queued_in_the_first_format_is_delivered_after_the_upgrade(
    account, upstream, relay_to
):
    tid = store(
        account,
        FIRST_FORMAT,
        [("ana@rcpt.test", "to"), ("ben@rcpt.test", "cc"), ("cy@rcpt.test", "bcc")],
    )
    drain(relay_to(upstream))

    # Tracked HTML: one copy per recipient, each with its own links.
    assert sorted(r.rcpt_tos[0] for r in upstream.received) == [
        "ana@rcpt.test",
        "ben@rcpt.test",
        "cy@rcpt.test",
    ]
    for received in upstream.received:
        msg = received.message
        assert received.mail_from.startswith("b+")  # its own VERP return path
        assert msg["From"] == "Shop <shop@sender.test>"
        assert msg["To"] == "Ana <ana@rcpt.test>"
        assert msg["Cc"] == "ben@rcpt.test"
        assert msg["Bcc"] is None
        assert msg["Reply-To"] == "help@sender.test"
        assert msg["Subject"] == "Stored before the upgrade"
        assert msg["Date"] == "Thu, 13 Nov 2025 02:13:20 +0000"
        assert msg["Message-ID"] == f"<{tid}@sender.test>"
        assert msg["X-Campaign"] == "autumn"
        text = msg.get_body(("plain",)).get_content()
        html = msg.get_body(("html",)).get_content()
        assert text.strip() == "Plain words."
        assert re.search(r'href="http://127\.0\.0\.1:8000/t/c/[^"]+"', html)
        assert "/t/o/" in html
        assert "https://shop.test/o/1" not in html
        (attachment,) = msg.iter_attachments()
        assert attachment.get_filename() == "note.txt"
        assert attachment.get_content_type() == "text/plain"
        assert attachment.get_payload(decode=True) == base64.b64decode("aGVsbG8gd29ybGQ=")
    assert {r.status for r in Recipient.select()} == {"Delivery"}


def test_a_message_that_cannot_be_built_bounces_at_once(account, upstream, relay_to):
    unbuildable = {**FIRST_FORMAT, "headers": [{"name": "Content-Type", "value": "text/x"}]}
    unreadable = {"v": 99, "whatever": True}
    first = store(account, unbuildable, [("ana@rcpt.test", "to")])
    second = store(account, {**unreadable, "from": {"email": "a@sender.test"}, "subject": "s"},
                   [("ben@rcpt.test", "to")])  # fmt: skip
    drain(relay_to(upstream))

    assert upstream.received == []
    for tid, reason in ((first, "Content-Type"), (second, "version 99")):
        recipient = Recipient.get(Recipient.transmission == tid)
        assert recipient.status == "Bounce"
        assert recipient.attempts == 1
        assert recipient.next_attempt_at is None
        (event,) = Event.select().where(Event.recipient == recipient.id)
        detail = json.loads(event.detail)
        assert event.status == "Bounce"
        assert detail["reply"].startswith("message could not be built: ")
        assert reason in detail["reply"]


def test_a_large_message_is_stored_in_chunks_and_delivered_intact(client, auth, upstream, relay_to):
    data = os.urandom(PAYLOAD_CHUNK_CHARS * 3)
    html = "<p>" + 'Grüße, 日本, 😀 "quoted" \\ ' * 20_000 + "</p>"
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "to": [{"email": "ana@rcpt.test"}],
            "subject": "Large",
            "bodyHtml": html,
            "attachments": [{"filename": "data.bin", "value": base64.b64encode(data).decode()}],
        },
    )
    assert response.status_code == 200, response.get_json()
    tid = response.get_json()["transmissionId"]
    assert Transmission.get_by_id(tid).payload is None
    assert PayloadChunk.select().where(PayloadChunk.transmission == tid).count() > 3

    drain(relay_to(upstream))
    (received,) = upstream.received
    assert received.message.get_body(("html",)).get_content().rstrip("\r\n") == html
    (attachment,) = received.message.iter_attachments()
    assert attachment.get_payload(decode=True) == data
    assert Recipient.get(Recipient.transmission == tid).status == "Delivery"


def test_a_large_message_is_stored_whole_or_not_at_all(account):
    """A failure after its chunks are written (here: the last rows of its transaction) leaves
    neither the message nor any of its chunks."""
    content = base64.b64encode(os.urandom(PAYLOAD_CHUNK_CHARS * 2)).decode()
    message = OutgoingMessage(
        Mailbox("shop@sender.test"),
        "Large",
        to=(Mailbox("ana@rcpt.test"),),
        text="See the attachment.",
        attachments=(Attachment("data.bin", content),),
    )
    tid = new_id()
    clashing = (PayloadChunk, PAYLOAD_CHUNK_FIELDS, [(tid, 0, "taken")])
    with pytest.raises(peewee.IntegrityError):
        queue_message(account, message, {}, transmission_id=tid, also=[clashing])
    assert Transmission.select().count() == 0
    assert PayloadChunk.select().count() == 0
    assert Recipient.select().count() == 0

    queue_message(account, message, {}, transmission_id=tid)
    assert PayloadChunk.select().where(PayloadChunk.transmission == tid).count() > 1
