"""Templates through the SDK against the live service, ETags and sending with a templateId."""

from __future__ import annotations

import pytest

from layang.client import ConflictError, NotFoundError, PreconditionFailedError, ValidationError
from tests.client.conftest import delivered_to
from tests.conftest import drain

HTML = "<!DOCTYPE html><html><body><p>Hello {{name}}, order {{order}} shipped.</p></body></html>"


def create(sdk, template_id="shipped", **changes):
    fields = {
        "id": template_id,
        "name": "Order shipped",
        "subject": "Order {{order}} shipped",
        "body_html": HTML,
        "body_text": "Hello {{name}}, order {{order}} shipped.",
        **changes,
    }
    return sdk.templates.create(**fields)


def test_lifecycle_with_etags(sdk):
    created = create(sdk)
    assert created["id"] == "shipped" and created["version"] == 1
    assert set(created["shortcodes"]) == {"name", "order"}

    template, etag = sdk.templates.get_with_etag("shipped")
    assert etag == '"shipped-v1"'
    assert template == sdk.templates.get("shipped") and template["bodyHtml"] == HTML

    updated = sdk.templates.update("shipped", subject="Shipped: {{order}}", if_match=etag)
    assert updated["version"] == 2 and updated["subject"] == "Shipped: {{order}}"
    assert updated["bodyText"] == "Hello {{name}}, order {{order}} shipped."  # kept

    with pytest.raises(PreconditionFailedError) as stale:
        sdk.templates.update("shipped", name="Again", if_match=etag)
    assert stale.value.status == 412 and stale.value.error == "precondition_failed"
    assert sdk.templates.get("shipped")["version"] == 2

    # An ETag given without its quotes is the same ETag; None removes a part.
    removed = sdk.templates.update("shipped", body_text=None, if_match="shipped-v2")
    assert removed["version"] == 3 and removed["bodyText"] is None
    assert sdk.templates.update("shipped", name="Renamed")["name"] == "Renamed"

    assert sdk.templates.preview("shipped", {"name": "Ana", "order": "A-42"}) == {
        "subject": "Shipped: A-42",
        "bodyHtml": HTML.replace("{{name}}", "Ana").replace("{{order}}", "A-42"),
        "bodyText": None,
    }

    sdk.templates.delete("shipped")
    with pytest.raises(NotFoundError) as gone:
        sdk.templates.get("shipped")
    assert gone.value.status == 404 and gone.value.error == "not_found"
    assert "shipped" in gone.value.message
    with pytest.raises(NotFoundError):
        sdk.templates.delete("shipped")


def test_list_follows_cursors(sdk):
    for i in range(5):
        create(sdk, f"t{i}", name=f"Template {i}")
    assert [t["id"] for t in sdk.templates.list(page_size=2)] == [f"t{i}" for i in range(5)]


def test_send_with_a_template(sdk, upstream, relay_to):
    create(sdk)
    sdk.send(
        from_="shop@shop.example",
        to="Ana <ana@rcpt.example>",
        template_id="shipped",
        substitution_data={"name": "Ana", "order": "A-42"},
    )
    drain(relay_to(upstream))
    message = delivered_to(upstream, "ana@rcpt.example")
    assert message["Subject"] == "Order A-42 shipped"
    assert message["To"] == "Ana <ana@rcpt.example>"
    assert message.get_body(("plain",)).get_content().strip() == "Hello Ana, order A-42 shipped."
    assert "Hello Ana, order A-42 shipped." in message.get_body(("html",)).get_content()


def test_template_errors(sdk):
    create(sdk)
    with pytest.raises(ConflictError) as duplicate:
        create(sdk)
    assert duplicate.value.status == 409 and duplicate.value.error == "conflict"
    assert duplicate.value.message.startswith("id:")

    with pytest.raises(ValidationError) as broken:
        create(sdk, "broken", body_text="Hello {{name")
    assert broken.value.status == 400 and broken.value.error == "validation_failed"
    assert "bodyText" in broken.value.errors and "bodyText" in broken.value.message

    with pytest.raises(NotFoundError) as unknown:
        sdk.send(from_="shop@shop.example", to="ana@rcpt.example", template_id="nope")
    assert unknown.value.error == "template_not_found" and "templateId" in unknown.value.message
    with pytest.raises(NotFoundError):
        sdk.templates.preview("nope", {})
    with pytest.raises(NotFoundError):
        sdk.templates.update("nope", name="x")


def test_send_with_each_recipients_own_data(sdk, upstream, relay_to):
    create(sdk)
    tid = sdk.send(
        from_="shop@shop.example",
        to=[
            {"email": "ana@rcpt.example", "substitution_data": {"name": "Ana"}},
            {"email": "budi@rcpt.example", "name": "Budi", "metadata": {"user": 2}},
        ],
        template_id="shipped",
        substitution_data={"name": "friend", "order": "A-42"},
        metadata={"user": 0},
    )
    drain(relay_to(upstream))
    ana = delivered_to(upstream, "ana@rcpt.example").get_body(("plain",)).get_content()
    budi = delivered_to(upstream, "budi@rcpt.example").get_body(("plain",)).get_content()
    assert ana.strip() == "Hello Ana, order A-42 shipped."
    assert budi.strip() == "Hello friend, order A-42 shipped."
    records = {r["recipient"]: r["metadata"] for r in sdk.transmissions.get(tid)["recipients"]}
    assert records == {"ana@rcpt.example": {"user": 0}, "budi@rcpt.example": {"user": 2}}
