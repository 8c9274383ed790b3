"""``client.inbound`` against the live service: domains, routes, and the mail a real inbound
server received, read back raw and posted again."""

from __future__ import annotations

import smtplib
from dataclasses import replace

import pytest

from layang.client import ConflictError, NotFoundError, ValidationError
from layang.inbound.server import inbound_server
from tests.delivery.test_crash import free_port

DOMAIN = "in.sdk.localhost"


@pytest.fixture
def config(config):
    return replace(config, inbound_bind=f"127.0.0.1:{free_port()}", webhook_allow_private=True)


def test_domains_routes_and_messages(sdk, config):
    created = sdk.inbound.domains.create(DOMAIN)
    assert created["status"] == "pending" and created["records"][0]["type"] == "MX"
    with pytest.raises(ConflictError):
        sdk.inbound.domains.create(DOMAIN)
    assert sdk.inbound.domains.verify(DOMAIN)["status"] == "verified"
    assert [d["domain"] for d in sdk.inbound.domains.list()] == [DOMAIN]

    route = sdk.inbound.routes.create(f"*@{DOMAIN}", "hold")
    hook = sdk.inbound.routes.create(
        f"support@{DOMAIN}", url="http://127.0.0.1:9/hooks", spam_threshold=5
    )
    assert hook["secret"].startswith("whsec_") and "secret" not in sdk.inbound.routes.get(
        hook["id"]
    )
    assert sdk.inbound.routes.update(hook["id"], spam_threshold=8.5)["spamThreshold"] == 8.5
    assert sdk.inbound.routes.rotate_secret(hook["id"])["secret"] != hook["secret"]
    with pytest.raises(ValidationError):
        sdk.inbound.routes.create(f"x@{DOMAIN}", "webhook")
    assert {r["id"] for r in sdk.inbound.routes.list()} == {route["id"], hook["id"]}

    server = inbound_server(config)
    server.start()
    data = b"From: ana@sender.example\r\nSubject: kept\r\n\r\nHello.\r\n"
    try:
        with smtplib.SMTP(server.hostname, server.port, local_hostname="mx.test") as smtp:
            smtp.sendmail("ana@sender.example", [f"docs@{DOMAIN}"], data)
    finally:
        server.stop()
    [message] = list(sdk.inbound.messages.list(status="held"))
    assert message["message"]["subject"] == "kept" and message["routeId"] == route["id"]
    assert sdk.inbound.messages.raw(message["id"]) == data
    assert sdk.inbound.messages.get(message["id"])["attempts"] == []
    with pytest.raises(ValidationError):
        sdk.inbound.messages.retry(message["id"])  # a hold route posts nowhere
    with pytest.raises(NotFoundError):
        sdk.inbound.messages.attachment(message["id"], 0)
    sdk.inbound.routes.delete(route["id"])
    sdk.inbound.domains.delete(DOMAIN)
    assert list(sdk.inbound.domains.list()) == []
    assert len(list(sdk.inbound.messages.list())) == 1  # mail received stays
