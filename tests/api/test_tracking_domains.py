"""Tracking domains (CONTRACT section 23) through the API, verified against a real DNS server
(dnslib): the CNAME to publish, verification, tracked links and pixel on the verified domain,
and ``/internal/tls-allowed`` for the TLS proxy, on SQLite and PostgreSQL."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.domain import accounts
from tests.conftest import BACKENDS, drain

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
URL = "/v1/layang/tracking-domains"


@pytest.fixture
def config(config, dns_zone):
    return replace(config, dns_resolver=dns_zone.address, public_url="https://track.layang.test")


def test_add_publish_verify_and_links_use_the_domain(client, auth, dns_zone, upstream, relay_to):
    created = client.post(URL, headers=auth, json={"domain": "Links.Shop.Example."})
    assert created.status_code == 201, created.json
    body = created.json
    assert (body["domain"], body["status"]) == ("links.shop.example", "pending")
    assert body["records"] == [
        {"purpose": "tracking", "type": "CNAME", "name": "links.shop.example",
         "value": "track.layang.test"}
    ]  # fmt: skip
    assert client.get("/internal/tls-allowed?domain=links.shop.example").status_code == 404

    unpublished = client.post(f"{URL}/links.shop.example/verify", headers=auth)
    assert unpublished.status_code == 200
    assert unpublished.json["status"] == "pending" and "NXDOMAIN" in unpublished.json["found"]
    dns_zone.add_cname("links.shop.example", "elsewhere.example")
    wrong = client.post(f"{URL}/links.shop.example/verify", headers=auth).json
    assert (wrong["status"], wrong["found"]) == ("pending", "elsewhere.example")

    dns_zone.records.pop(("links.shop.example", "CNAME"))
    dns_zone.publish(body["records"])
    verified = client.post(f"{URL}/links.shop.example/verify", headers=auth)
    assert verified.status_code == 200
    assert set(verified.json) >= {"domain", "status", "records"}
    assert verified.json["status"] == "verified"
    allowed = client.get("/internal/tls-allowed?domain=LINKS.shop.example")
    assert allowed.status_code == 200
    assert client.get("/internal/tls-allowed?domain=track.layang.test").status_code == 404
    assert client.get("/internal/tls-allowed").status_code == 404

    sent = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": "shop@sender.test", "to": "ana@rcpt.test", "subject": "Hi",
            "bodyHtml": '<p>Hi</p><a href="https://shop.example/sale">Sale</a>',
            "optionsAttributes": {"clickTracking": True, "openTracking": True},
        },
    )  # fmt: skip
    assert sent.status_code == 200
    drain(relay_to(upstream))
    html = upstream.received[0].message.get_body(("html",)).get_content()
    assert 'href="https://links.shop.example/t/c/' in html
    assert "url(https://links.shop.example/t/o/" in html
    assert "track.layang.test" not in html

    listed = client.get(URL, headers=auth).json["items"]
    assert [d["domain"] for d in listed] == ["links.shop.example"]


def test_refusals_and_accounts_kept_apart(client, auth, dns_zone):
    assert client.post(URL, headers=auth, json={"domain": "not a domain"}).status_code == 400
    own = client.post(URL, headers=auth, json={"domain": "track.layang.test"})
    assert own.status_code == 400 and list(own.json["errors"]) == ["domain"]
    assert client.post(URL, headers=auth, json={"domain": "l.shop.example"}).status_code == 201
    again = client.post(URL, headers=auth, json={"domain": "l.shop.example"})
    assert again.status_code == 409
    dns_zone.add_cname("l.shop.example", "track.layang.test")
    assert client.post(f"{URL}/l.shop.example/verify", headers=auth).json["status"] == "verified"

    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    assert client.get(f"{URL}/l.shop.example", headers=other_auth).status_code == 404
    assert (
        client.post(URL, headers=other_auth, json={"domain": "l.shop.example"}).status_code == 201
    )
    taken = client.post(f"{URL}/l.shop.example/verify", headers=other_auth)
    assert taken.status_code == 409
    assert client.delete(f"{URL}/l.shop.example", headers=auth).status_code == 204
    assert client.get("/internal/tls-allowed?domain=l.shop.example").status_code == 404
