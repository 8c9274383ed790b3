"""Inbound domains and routes: the MX record to publish, verification against a real DNS server,
routes matched at RCPT by a real inbound server spoken to with smtplib, accounts kept apart."""

from __future__ import annotations

import smtplib
from dataclasses import replace

import pytest

from layang.domain import accounts
from layang.inbound.server import inbound_server
from tests.conftest import BACKENDS
from tests.delivery.test_crash import free_port

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

DOMAIN = "in.shop.example"


@pytest.fixture
def config(config, dns_zone):
    return replace(
        config,
        inbound_bind=f"127.0.0.1:{free_port()}",
        inbound_hostname="mx.layang.example",
        dns_resolver=dns_zone.address,
        webhook_allow_private=True,
        bounce_domain="bounces.layang.example",
    )


@pytest.fixture
def server(app, config):
    controller = inbound_server(config)
    controller.start()
    yield controller
    controller.stop()


def other_auth(name: str = "other") -> dict[str, str]:
    account = accounts.create_account(name, live=True)
    return {"Authorization": f"Bearer {accounts.create_api_key(account, 'tests')[1]}"}


def add_verified_domain(client, auth, zone, domain: str = DOMAIN) -> dict:
    created = client.post("/v1/layang/inbound/domains", headers=auth, json={"domain": domain})
    assert created.status_code == 201, created.json
    zone.publish(created.json["records"])
    verified = client.post(f"/v1/layang/inbound/domains/{domain}/verify", headers=auth)
    assert verified.status_code == 200 and verified.json["status"] == "verified", verified.json
    return verified.json


def add_route(client, auth, match: str, action: str = "webhook", **extra) -> dict:
    body = {"match": match, "action": action, **extra}
    if action == "webhook":
        body.setdefault("url", "http://127.0.0.1:9/hooks")
    response = client.post("/v1/layang/inbound/routes", headers=auth, json=body)
    assert response.status_code == 201, response.json
    return response.json


def rcpt(server, address: str) -> tuple[int, bytes]:
    with smtplib.SMTP(server.hostname, server.port, local_hostname="mx.test", timeout=30) as smtp:
        smtp.ehlo()
        smtp.mail("ann@example.net")
        return smtp.rcpt(address)


def test_a_domain_lists_its_mx_and_verifies_once_dns_names_the_inbound_host(client, auth, dns_zone):
    created = client.post(
        "/v1/layang/inbound/domains", headers=auth, json={"domain": "In.Shop.Example."}
    )
    assert created.status_code == 201
    assert created.json["domain"] == DOMAIN and created.json["status"] == "pending"
    [record] = created.json["records"]
    assert (record["type"], record["name"], record["value"]) == (
        "MX",
        DOMAIN,
        "10 mx.layang.example",
    )
    missing = client.post(f"/v1/layang/inbound/domains/{DOMAIN}/verify", headers=auth).json
    assert missing["status"] == "pending" and missing["records"][0]["status"] == "missing"
    dns_zone.add_mx(DOMAIN, 10, "mx.elsewhere.example")
    wrong = client.post(f"/v1/layang/inbound/domains/{DOMAIN}/verify", headers=auth).json
    assert wrong["status"] == "pending" and wrong["records"][0]["status"] == "mismatch"
    dns_zone.remove(DOMAIN, "MX")
    dns_zone.publish(created.json["records"])
    done = client.post(f"/v1/layang/inbound/domains/{DOMAIN}/verify", headers=auth).json
    assert done["status"] == "verified" and done["verifiedAt"]
    listed = client.get("/v1/layang/inbound/domains", headers=auth).json
    assert [d["domain"] for d in listed["items"]] == [DOMAIN]
    again = client.post("/v1/layang/inbound/domains", headers=auth, json={"domain": DOMAIN})
    assert again.status_code == 409
    bad = client.post("/v1/layang/inbound/domains", headers=auth, json={"domain": "not a domain"})
    assert bad.status_code == 400 and list(bad.json["errors"]) == ["domain"]


def test_a_domain_verified_by_one_account_is_refused_to_another(client, auth, dns_zone):
    add_verified_domain(client, auth, dns_zone)
    theirs = other_auth()
    refused = client.post("/v1/layang/inbound/domains", headers=theirs, json={"domain": DOMAIN})
    assert refused.status_code == 409
    assert client.get(f"/v1/layang/inbound/domains/{DOMAIN}", headers=theirs).status_code == 404
    assert client.get("/v1/layang/inbound/domains", headers=theirs).json["items"] == []


def test_routes_show_their_secret_once_and_name_the_field_they_refuse(client, auth, dns_zone):
    add_verified_domain(client, auth, dns_zone)
    route = add_route(client, auth, f"support@{DOMAIN}", spamThreshold=5)
    assert route["secret"].startswith("whsec_") and route["match"] == f"support@{DOMAIN}"
    assert route["action"] == "webhook" and route["spamThreshold"] == 5
    shown = client.get(f"/v1/layang/inbound/routes/{route['id']}", headers=auth).json
    assert "secret" not in shown and shown["url"] == "http://127.0.0.1:9/hooks"
    rotated = client.post(f"/v1/layang/inbound/routes/{route['id']}/rotate-secret", headers=auth)
    assert rotated.json["secret"].startswith("whsec_")
    assert rotated.json["secret"] != route["secret"]
    # A route's endpoint is not one of the account's webhooks.
    assert client.get("/v1/layang/webhooks", headers=auth).json["items"] == []

    cases = [
        ({"match": f"sales@{DOMAIN}", "action": "webhook"}, "url"),
        ({"match": f"sales@{DOMAIN}", "action": "hold", "url": "https://x.example/h"}, "url"),
        ({"match": "sales", "action": "hold"}, "match"),
        ({"match": f"sa+les@{DOMAIN}", "action": "hold"}, "match"),
        ({"match": "sales@unknown.example", "action": "hold"}, "match"),
        ({"match": f"sales@{DOMAIN}", "action": "forward"}, "action"),
        ({"match": f"sales@{DOMAIN}", "action": "hold", "spamThreshold": 500}, "spamThreshold"),
    ]
    for body, field in cases:
        response = client.post("/v1/layang/inbound/routes", headers=auth, json=body)
        assert response.status_code == 400, (body, response.json)
        assert list(response.json["errors"]) == [field], (body, response.json)
    taken = client.post(
        "/v1/layang/inbound/routes",
        headers=auth,
        json={"match": f"support@{DOMAIN}", "action": "hold"},
    )
    assert taken.status_code == 409

    theirs = other_auth()
    assert client.get(f"/v1/layang/inbound/routes/{route['id']}", headers=theirs).status_code == 404
    assert client.get("/v1/layang/inbound/routes", headers=theirs).json["items"] == []
    on_ours = client.post(
        "/v1/layang/inbound/routes", headers=theirs, json={"match": f"x@{DOMAIN}", "action": "hold"}
    )
    assert on_ours.status_code == 400 and list(on_ours.json["errors"]) == ["match"]
    deleted = client.delete(f"/v1/layang/inbound/routes/{route['id']}", headers=theirs)
    assert deleted.status_code == 404


def test_rcpt_takes_the_most_specific_route_and_refuses_the_rest(client, auth, dns_zone, server):
    add_verified_domain(client, auth, dns_zone)
    add_route(client, auth, f"support@{DOMAIN}")
    add_route(client, auth, f"spam@{DOMAIN}", "reject")
    assert rcpt(server, f"support@{DOMAIN}")[0] == 250
    assert rcpt(server, f"Support+ticket-123@{DOMAIN}")[0] == 250
    code, text = rcpt(server, f"sales@{DOMAIN}")
    assert code == 550 and text.startswith(b"5.1.1")
    code, text = rcpt(server, f"spam@{DOMAIN}")
    assert code == 550 and text.startswith(b"5.7.1")
    # A wildcard takes every other address; the exact match still wins over it.
    add_route(client, auth, f"*@{DOMAIN}", "hold")
    assert rcpt(server, f"sales@{DOMAIN}")[0] == 250
    assert rcpt(server, f"spam@{DOMAIN}")[0] == 550
    # A pending domain's mail is not taken.
    client.post("/v1/layang/inbound/domains", headers=auth, json={"domain": "pending.example"})
    add_route(client, auth, "*@pending.example", "hold")
    assert rcpt(server, "a@pending.example")[0] == 550


def test_the_bounce_domain_and_anothers_return_path_cannot_be_taken(client, auth, config):
    bounce = client.post(
        "/v1/layang/inbound/domains", headers=auth, json={"domain": config.bounce_domain}
    )
    assert bounce.status_code == 409 and "bounce domain" in bounce.json["message"]
    theirs = other_auth()
    sending = client.post("/v1/layang/domains", headers=theirs, json={"domain": "shop.example"})
    assert sending.status_code == 201, sending.json
    taken = client.post(
        "/v1/layang/inbound/domains", headers=auth, json={"domain": "bounces.shop.example"}
    )
    assert taken.status_code == 409 and "return-path" in taken.json["message"]
