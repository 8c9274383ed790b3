"""Authorized recipients through the SDK, on a sandbox account of the live service."""

from __future__ import annotations

import pytest

from layang.client import ConflictError, NotFoundError, ValidationError
from tests.client.conftest import SANDBOX_SENDER, delivered_to
from tests.conftest import drain


def test_authorized_recipients_lifecycle(sandbox_sdk, upstream, relay_to):
    ana = sandbox_sdk.authorized_recipients.add("ana@rcpt.example", name="Ana")
    assert ana["email"] == "ana@rcpt.example" and ana["name"] == "Ana"
    assert ana["status"] == "unverified" and ana["verifiedAt"] is None
    bo = sandbox_sdk.authorized_recipients.add("Bo B <bo@rcpt.example>")
    assert bo["name"] == "Bo B" and bo["email"] == "bo@rcpt.example"
    drain(relay_to(upstream))
    assert (
        "would like to send you test email" in delivered_to(upstream, "ana@rcpt.example")["Subject"]
    )

    listed = list(sandbox_sdk.authorized_recipients.list(page_size=1))
    assert [r["id"] for r in listed] == [bo["id"], ana["id"]]
    assert sandbox_sdk.authorized_recipients.get(ana["id"]) == ana

    transmission_id = sandbox_sdk.authorized_recipients.resend(ana["id"])
    assert sandbox_sdk.transmissions.get(transmission_id)["recipients"][0]["recipient"] == (
        "ana@rcpt.example"
    )
    before = len(upstream.received)
    drain(relay_to(upstream))
    assert len(upstream.received) == before + 1

    with pytest.raises(ConflictError) as duplicate:
        sandbox_sdk.authorized_recipients.add("ana@rcpt.example")
    assert duplicate.value.status == 409 and "ana@rcpt.example" in duplicate.value.message

    sandbox_sdk.authorized_recipients.delete(ana["id"])
    with pytest.raises(NotFoundError) as gone:
        sandbox_sdk.authorized_recipients.get(ana["id"])
    assert gone.value.error == "not_found"
    with pytest.raises(NotFoundError):
        sandbox_sdk.authorized_recipients.resend(ana["id"])
    assert [r["id"] for r in sandbox_sdk.authorized_recipients.list()] == [bo["id"]]


def test_sandbox_refuses_unauthorized_recipients(sandbox_sdk):
    sandbox_sdk.authorized_recipients.add("ana@rcpt.example")  # listed, not yet verified
    with pytest.raises(ValidationError) as refused:
        sandbox_sdk.send(
            from_=SANDBOX_SENDER,
            to=["ana@rcpt.example"],
            cc=["eve@rcpt.example"],
            subject="Test",
            body_text="hi",
        )
    error = refused.value
    assert error.status == 422 and error.error == "recipient_not_authorized"
    assert "ana@rcpt.example" in error.message and "eve@rcpt.example" in error.message
    assert set(error.errors) == {"to", "cc"}
    assert error.errors["cc"]["0"]["email"]

    with pytest.raises(ValidationError) as sender:
        sandbox_sdk.send(
            from_="shop@shop.example", to="ana@rcpt.example", subject="T", body_text="x"
        )
    assert sender.value.error == "sender_not_allowed"
    assert sender.value.errors == {
        "from": {"email": [f"Sandbox accounts send from {SANDBOX_SENDER} only."]}
    }
