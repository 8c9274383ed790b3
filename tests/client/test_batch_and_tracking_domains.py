"""The SDK's batch sends and tracking domains against the live service (a real DNS server for
the CNAME)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.client import ConflictError, NotFoundError, ValidationError
from tests.client.conftest import delivered_to
from tests.conftest import drain


@pytest.fixture
def config(config, dns_zone):
    return replace(config, dns_resolver=dns_zone.address, public_url="https://track.layang.test")


def test_batch_answers_each_message_in_order(sdk, upstream, relay_to):
    messages = [
            {"from": "shop@shop.example", "to": "ana@rcpt.example", "subject": "One",
             "bodyText": "1", "tags": ["batch"]},
            {"from": "shop@shop.example", "to": "nobody", "subject": "Two", "bodyText": "2"},
            {"from": "shop@shop.example", "to": "budi@rcpt.example", "subject": "Three",
             "bodyText": "3"},
    ]  # fmt: skip
    results = sdk.transmissions.batch(messages, idempotency_key="sdk-batch-1")
    assert "transmissionId" in results[0] and "transmissionId" in results[2]
    assert results[1]["status"] == 400 and results[1]["error"] == "validation_failed"
    assert sdk.transmissions.batch(messages, idempotency_key="sdk-batch-1") == results
    with pytest.raises(ValidationError):
        sdk.transmissions.batch([{"from": "x@y.example"}], idempotency_key="sdk-batch-1")
    drain(relay_to(upstream))
    assert delivered_to(upstream, "budi@rcpt.example")["Subject"] == "Three"
    assert [r["recipient"] for r in sdk.activity.list(tag="batch")] == ["ana@rcpt.example"]


def test_tracking_domains(sdk, dns_zone):
    created = sdk.tracking_domains.create("links.shop.example")
    assert created["status"] == "pending"
    assert created["records"][0]["value"] == "track.layang.test"
    assert sdk.tracking_domains.verify("links.shop.example")["status"] == "pending"
    dns_zone.add_cname("links.shop.example", "track.layang.test")
    assert sdk.tracking_domains.verify("links.shop.example")["status"] == "verified"
    assert [d["domain"] for d in sdk.tracking_domains.list()] == ["links.shop.example"]
    assert sdk.tracking_domains.get("links.shop.example")["status"] == "verified"
    with pytest.raises(ConflictError):
        sdk.tracking_domains.create("links.shop.example")
    sdk.tracking_domains.delete("links.shop.example")
    with pytest.raises(NotFoundError):
        sdk.tracking_domains.get("links.shop.example")
