"""``client.webhooks`` against the live service, and ``verify_webhook`` on what it delivers."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from standardwebhooks import Webhook

from layang.client import Layang, LayangError, NotFoundError, ValidationError, verify_webhook
from layang.config import Config
from layang.webhooks.dispatcher import Dispatcher
from tests.support.webhook_receiver import Receiver


@pytest.fixture
def config(config: Config) -> Config:
    return replace(config, webhook_allow_private=True)


def test_the_webhooks_namespace_follows_the_api(sdk: Layang, receiver: Receiver, config):
    made = sdk.webhooks.create(receiver.url, ["Delivery", "Bounce"], description="shop")
    assert made["secret"].startswith("whsec_") and made["events"] == ["Delivery", "Bounce"]
    assert [e["id"] for e in sdk.webhooks.list()] == [made["id"]]
    assert "secret" not in sdk.webhooks.get(made["id"])
    updated = sdk.webhooks.update(made["id"], events=["*"], enabled=False)
    assert updated["events"] == ["*"] and updated["enabled"] is False
    sdk.webhooks.update(made["id"], enabled=True)
    rotated = sdk.webhooks.rotate_secret(made["id"])["secret"]
    assert rotated != made["secret"]

    event_id = sdk.webhooks.test(made["id"])
    dispatcher = Dispatcher(config, name="sdk-test")
    try:
        deadline = time.monotonic() + 15
        while not receiver.delivered() and time.monotonic() < deadline:
            dispatcher.step()
            time.sleep(0.02)
    finally:
        dispatcher.close()
    (request,) = receiver.delivered()
    for secret in (rotated, made["secret"]):  # both sign during the day after a rotation
        payload = verify_webhook(request.body, request.headers, secret)
        assert payload["events"][0]["id"] == event_id
    (attempt,) = sdk.webhooks.deliveries(made["id"])
    assert attempt["status"] == "delivered" and attempt["eventIds"] == [event_id]

    with pytest.raises(ValidationError) as refused:
        sdk.webhooks.create("https://169.254.169.254/latest")
    assert "url" in refused.value.errors
    sdk.webhooks.delete(made["id"])
    with pytest.raises(NotFoundError):
        sdk.webhooks.get(made["id"])


SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def signed(body: bytes, secret: str = SECRET, at: datetime | None = None) -> dict[str, str]:
    at = at or datetime.now(UTC)
    signature = Webhook(secret).sign("msg_1", at, body.decode())
    return {
        "Webhook-Id": "msg_1",
        "Webhook-Timestamp": str(int(at.timestamp())),
        "Webhook-Signature": signature,
    }


def test_verify_webhook_accepts_what_the_reference_library_signs():
    body = b'{"type": "layang.events", "events": []}'
    assert verify_webhook(body, signed(body), SECRET) == {"type": "layang.events", "events": []}
    assert verify_webhook(body.decode(), signed(body), SECRET)["type"] == "layang.events"
    other = "whsec_" + "QUJD" * 8
    headers = signed(body)
    headers["Webhook-Signature"] = (
        signed(body, other)["Webhook-Signature"] + " " + headers["Webhook-Signature"]
    )
    assert verify_webhook(body, headers, SECRET)["events"] == []


@pytest.mark.parametrize(
    "tamper",
    [
        lambda body, headers: (body + b" ", headers),
        lambda body, headers: (body, {**headers, "Webhook-Id": "msg_2"}),
        lambda body, headers: (body, {k: v for k, v in headers.items() if k != "Webhook-Id"}),
        lambda body, headers: (body, {**headers, "Webhook-Signature": "v1,AAAA"}),
        lambda body, headers: (
            body,
            signed(body, at=datetime.fromtimestamp(time.time() - 301, UTC)),
        ),
        lambda body, headers: (
            body,
            signed(body, at=datetime.fromtimestamp(time.time() + 301, UTC)),
        ),
        lambda body, headers: (body, signed(body, "whsec_" + "QUJD" * 8)),
    ],
)
def test_verify_webhook_refuses_tampered_stale_or_foreign_requests(tamper):
    body = b'{"type": "layang.events", "events": []}'
    bad_body, bad_headers = tamper(body, signed(body))
    with pytest.raises(LayangError) as refused:
        verify_webhook(bad_body, bad_headers, SECRET)
    assert refused.value.error == "invalid_signature"


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_=", None, b"", b"whsec_"])
def test_verify_webhook_refuses_an_empty_secret(secret):
    body = b'{"type": "layang.events", "events": []}'
    # What anyone can compute: the HMAC under an empty key.
    forged = signed(body)
    key_less = base64.b64encode(
        hmac.new(
            b"", f"msg_1.{forged['Webhook-Timestamp']}.".encode() + body, hashlib.sha256
        ).digest()
    ).decode()
    forged["Webhook-Signature"] = f"v1,{key_less}"
    with pytest.raises(ValueError, match="secret"):
        verify_webhook(body, forged, secret)
