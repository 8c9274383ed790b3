"""The SDK against the live service: sending, what arrives upstream, transmissions, activity."""

from __future__ import annotations

import base64
import itertools

import httpx
import pytest

from layang.client import Layang, ValidationError
from tests.client.conftest import delivered_to
from tests.conftest import drain

PDF = b"%PDF-1.4\n" + bytes(range(256)) + b"\n%%EOF\n"


def attachments_of(message):
    return {
        part.get_filename(): (part.get_content_type(), part.get_payload(decode=True))
        for part in message.iter_attachments()
    }


def test_plain_send_arrives(sdk, upstream, relay_to):
    transmission_id = sdk.send(
        from_="Shop <shop@shop.example>",
        to="ana@rcpt.example",
        subject="Your order",
        body_text="It shipped.",
    )
    assert isinstance(transmission_id, str) and transmission_id
    drain(relay_to(upstream))

    message = delivered_to(upstream, "ana@rcpt.example")
    assert message["From"] == "Shop <shop@shop.example>"
    assert message["To"] == "ana@rcpt.example"
    assert message["Subject"] == "Your order"
    assert message.get_body(("plain",)).get_content().strip() == "It shipped."
    assert upstream.received[-1].mail_from.startswith("b+")  # its VERP return path


def test_html_and_every_address_form(sdk, upstream, relay_to):
    sdk.send(
        from_={"email": "shop@shop.example", "name": "The Shop"},
        to=["ana@rcpt.example", {"email": "bo@rcpt.example", "name": "Bo B"}],
        cc="Cy <cy@rcpt.example>",
        bcc=["dee@rcpt.example"],
        reply_to="Help Desk <help@shop.example>",
        subject="Receipt",
        body_text="Thanks.",
        body_html="<!DOCTYPE html><html><body><p>Thanks, <b>Ana</b>.</p></body></html>",
        headers={"X-Order": "A-42"},
        metadata={"order": "A-42"},
    )
    drain(relay_to(upstream))

    recipients = {r for received in upstream.received for r in received.rcpt_tos}
    assert recipients == {
        "ana@rcpt.example",
        "bo@rcpt.example",
        "cy@rcpt.example",
        "dee@rcpt.example",
    }
    message = delivered_to(upstream, "bo@rcpt.example")
    assert message["From"] == "The Shop <shop@shop.example>"
    assert message["To"] == "ana@rcpt.example, Bo B <bo@rcpt.example>"
    assert message["Cc"] == "Cy <cy@rcpt.example>"
    assert message["Reply-To"] == "Help Desk <help@shop.example>"
    assert message["X-Order"] == "A-42"
    assert "Bcc" not in message and b"dee@rcpt.example" not in upstream.received[-1].data
    assert "<b>Ana</b>" in message.get_body(("html",)).get_content()
    assert message.get_body(("plain",)).get_content().strip() == "Thanks."


def test_attachments_from_bytes_and_from_a_file(sdk, upstream, relay_to, tmp_path):
    invoice = tmp_path / "invoice.pdf"
    invoice.write_bytes(PDF)
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"line one\r\nline two\r\n")
    sdk.send(
        from_="shop@shop.example",
        to="ana@rcpt.example",
        subject="Files",
        body_text="Attached.",
        attachments=[
            invoice,  # a Path
            str(notes),  # a path as str
            ("logo.png", b"\x89PNG\r\n\x1a\n\x00\x01"),
            {"filename": "data.bin", "content": b"\x00\xff" * 300},
            {
                "filename": "table.csv",
                "value": base64.b64encode(b"a,b\n1,2\n").decode(),
                "mimeType": "text/csv",
            },
        ],
    )
    drain(relay_to(upstream))

    found = attachments_of(delivered_to(upstream, "ana@rcpt.example"))
    assert found["invoice.pdf"] == ("application/pdf", PDF)
    assert found["notes.txt"] == ("text/plain", b"line one\r\nline two\r\n")
    assert found["logo.png"] == ("image/png", b"\x89PNG\r\n\x1a\n\x00\x01")
    assert found["data.bin"] == ("application/octet-stream", b"\x00\xff" * 300)
    assert found["table.csv"] == ("text/csv", b"a,b\n1,2\n")


def test_transmission_lookup(sdk, upstream, relay_to):
    transmission_id = sdk.send(
        from_="shop@shop.example",
        to=["ana@rcpt.example", "bo@rcpt.example"],
        subject="Hi",
        body_text="x",
    )
    drain(relay_to(upstream))

    transmission = sdk.transmissions.get(transmission_id)
    assert transmission["transmissionId"] == transmission_id
    assert transmission["subject"] == "Hi"
    assert transmission["from"] == {"email": "shop@shop.example"}
    by_recipient = {r["recipient"]: r["status"] for r in transmission["recipients"]}
    assert by_recipient == {"ana@rcpt.example": "Delivery", "bo@rcpt.example": "Delivery"}


def test_activity_follows_cursors_lazily(live_server, api_key):
    pages: list[httpx.Request] = []
    with (
        httpx.Client(event_hooks={"request": [pages.append]}) as http,
        Layang(api_key, base_url=live_server, http_client=http) as sdk,
    ):
        sent = [
            sdk.send(
                from_="shop@shop.example",
                to=f"r{i}@rcpt.example",
                subject=f"Message {i}",
                body_text="x",
                metadata={"batch": "seven"},
            )
            for i in range(7)
        ]
        pages.clear()

        records = sdk.activity.list(page_size=3)
        assert pages == []  # nothing fetched until iterated
        first = next(records)
        assert len(pages) == 1
        everything = [first, *records]

        assert [r["transmissionId"] for r in everything] == sent[::-1]
        assert [r["recipient"] for r in everything] == [
            f"r{i}@rcpt.example" for i in range(6, -1, -1)
        ]
        assert all(r["metadata"] == {"batch": "seven"} for r in everything)
        assert len(pages) == 3
        assert [p.url.params["limit"] for p in pages] == ["3", "3", "3"]
        assert "cursor" not in pages[0].url.params and pages[1].url.params["cursor"]

        # Filters reach the service; an unconsumed iterator costs one page only.
        only = list(sdk.activity.list(recipient="r4@rcpt.example"))
        assert [r["transmissionId"] for r in only] == [sent[4]]
        part = list(sdk.activity.list(recipient_contains="R5@"))
        assert [r["recipient"] for r in part] == ["r5@rcpt.example"]
        by_id = list(sdk.activity.list(transmission_id=sent[2], status="Injection"))
        assert [r["recipient"] for r in by_id] == ["r2@rcpt.example"]
        assert (
            list(itertools.islice(sdk.activity.list(page_size=2), 3))[-1]["transmissionId"]
            == sent[4]
        )
        assert list(sdk.activity.list(since="2999-01-01T00:00:00Z")) == []


def test_tags_label_records_and_filter_activity(sdk):
    tagged = sdk.send(
        from_="shop@shop.example",
        to="ana@rcpt.example",
        subject="Welcome",
        body_text="Hi",
        tags=("welcome", "spring"),
    )
    sdk.send(from_="shop@shop.example", to="budi@rcpt.example", subject="Hi", body_text="Hi")
    (record,) = sdk.activity.list(tag="welcome")
    assert record["transmissionId"] == tagged and record["tags"] == ["welcome", "spring"]
    assert list(sdk.activity.list(tag="nothing")) == []
    with pytest.raises(ValidationError) as refused:
        sdk.send(from_="shop@shop.example", to="a@rcpt.example", subject="x", body_text="x",
                 tags=["x" * 65])  # fmt: skip
    assert "tags" in refused.value.errors


def test_scheduled_send_cancelled_and_rescheduled(sdk, upstream, relay_to):
    from datetime import UTC, datetime, timedelta

    from layang.client import ConflictError

    later = datetime.now(UTC) + timedelta(hours=2)
    kept = sdk.send(from_="shop@shop.example", to="ana@rcpt.example", subject="Later",
                    body_text="Hi", scheduled_at=later)  # fmt: skip
    dropped = sdk.send(from_="shop@shop.example", to="budi@rcpt.example", subject="Never",
                       body_text="Hi", scheduled_at=later.isoformat())  # fmt: skip
    assert sdk.transmissions.get(kept)["scheduledAt"].endswith("Z")
    cancelled = sdk.transmissions.cancel(dropped)
    assert [r["status"] for r in cancelled["recipients"]] == ["Cancelled"]
    moved = sdk.transmissions.reschedule(kept, datetime.now(UTC) - timedelta(seconds=1))
    assert moved["transmissionId"] == kept
    drain(relay_to(upstream))
    assert [r.rcpt_tos for r in upstream.received] == [["ana@rcpt.example"]]
    with pytest.raises(ConflictError):
        sdk.transmissions.cancel(kept)
