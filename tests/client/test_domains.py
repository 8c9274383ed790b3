"""Sending domains through the SDK, on the live service, checked against a real DNS server."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.client import ConflictError, NotFoundError, ValidationError


@pytest.fixture
def config(config, dns_zone):
    return replace(config, dns_resolver=dns_zone.address)


def test_domains_lifecycle(sdk, dns_zone):
    created = sdk.domains.create("example.com", return_path_domain="rp.example.com")
    assert created["status"] == "pending" and created["returnPathDomain"] == "rp.example.com"
    assert [d["domain"] for d in sdk.domains.list()] == ["example.com"]
    assert sdk.domains.get("example.com") == created

    dns_zone.publish(created["records"])
    verified = sdk.domains.verify("example.com")
    assert verified["status"] == "verified"
    assert {r["status"] for r in verified["records"]} == {"ok"}
    (old,) = verified["dkim"]

    rotated = sdk.domains.rotate("example.com")
    assert [k["status"] for k in rotated["dkim"]] == ["active", "pending"]
    with pytest.raises(ConflictError):
        sdk.domains.rotate("example.com")
    with pytest.raises(ConflictError) as only:
        sdk.domains.delete_key("example.com", old["selector"])
    assert "only active key" in only.value.message
    sdk.domains.delete_key("example.com", rotated["dkim"][1]["selector"])
    assert len(sdk.domains.get("example.com")["dkim"]) == 1

    with pytest.raises(ValidationError) as invalid:
        sdk.domains.create("not a domain")
    assert invalid.value.status == 400
    sdk.domains.delete("example.com")
    with pytest.raises(NotFoundError):
        sdk.domains.get("example.com")
