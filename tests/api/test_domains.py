"""``/v1/layang/domains``: the records to publish, checked against a real DNS server, keys made,
rotated and deleted, and the rule that a live account sends only from verified domains."""

from __future__ import annotations

import base64
import re
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.serialization import load_der_public_key

from layang import sealing
from layang.domain import accounts
from layang.domain.dns_lookup import DnsLookup
from layang.domain.sending_domains import verify_domain
from layang.mail import dkim
from layang.models import DkimKey
from tests.conftest import BACKENDS

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

URL = "/v1/layang/domains"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
def config(config, dns_zone):
    return replace(config, dns_resolver=dns_zone.address, inbound_host="mx.layang.test")


def add(client, auth, domain="example.com", **extra):
    response = client.post(URL, json={"domain": domain, **extra}, headers=auth)
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def verify(client, auth, domain="example.com"):
    response = client.post(f"{URL}/{domain}/verify", headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def by_purpose(body):
    return {r["purpose"]: r for r in body["records"] if r["purpose"] != "dkim"} | {
        "dkim": [r for r in body["records"] if r["purpose"] == "dkim"]
    }


def test_a_new_domain_is_pending_with_a_2048_bit_key_and_the_records_to_publish(client, auth):
    body = add(client, auth, "Example.COM")
    assert body["domain"] == "example.com"
    assert body["status"] == "pending"
    assert body["returnPathDomain"] == "bounces.example.com"
    assert body["checkedAt"] is None and ISO.match(body["createdAt"])
    (key,) = body["dkim"]
    assert key == {
        "selector": key["selector"],
        "algorithm": "rsa-sha256",
        "bits": 2048,
        "status": "pending",
    }
    assert re.fullmatch(r"lyg\d{4}[a-z0-9]{4}", key["selector"])
    records = by_purpose(body)
    (dkim_record,) = records["dkim"]
    assert dkim_record["type"] == "TXT"
    assert dkim_record["name"] == f"{key['selector']}._domainkey.example.com"
    value = dkim_record["value"]
    assert value.startswith("v=DKIM1; k=rsa; p=") and len(value) > 255  # shown whole
    public = load_der_public_key(base64.b64decode(value.split("p=")[1]))
    assert isinstance(public, rsa.RSAPublicKey) and public.key_size == 2048
    assert records["spf"] == {
        "purpose": "spf",
        "type": "TXT",
        "name": "bounces.example.com",
        "value": "v=spf1 ip4:127.0.0.1 ~all",
        "status": "missing",
        "found": None,
    }
    assert records["dmarc"]["name"] == "_dmarc.example.com"
    assert records["dmarc"]["value"] == ("v=DMARC1; p=none; rua=mailto:dmarc@bounces.example.com")
    assert records["return-path"]["type"] == "MX"
    assert records["return-path"]["name"] == "bounces.example.com"
    assert records["return-path"]["value"] == "10 mx.layang.test"
    assert [r["purpose"] for r in body["records"]] == ["dkim", "spf", "dmarc", "return-path"]
    assert "PRIVATE" not in str(body)

    assert client.get(f"{URL}/example.com", headers=auth).get_json() == body
    listed = client.get(URL, headers=auth).get_json()
    assert listed == {"items": [body], "nextCursor": None}


def test_the_spf_record_names_the_relay_when_it_is_an_smtp_server(app, client, auth, config):
    app.config["LAYANG"] = replace(config, relay_url="smtp://relay.example.net:587")
    body = add(client, auth)
    assert by_purpose(body)["spf"]["value"] == "v=spf1 a:relay.example.net ~all"


def test_direct_to_mx_the_spf_record_names_the_source_addresses(app, client, auth, config):
    sources = (("203.0.113.7", "mta1.example.com"), ("2001:db8::7", ""))
    app.config["LAYANG"] = replace(config, relay_url="mx:", source_addresses=sources)
    body = add(client, auth)
    assert by_purpose(body)["spf"]["value"] == "v=spf1 ip4:203.0.113.7 ip6:2001:db8::7 ~all"


def test_verify_with_nothing_published_reports_every_record_missing(client, auth):
    add(client, auth)
    body = verify(client, auth)
    assert body["status"] == "pending" and ISO.match(body["checkedAt"])
    assert body["dkim"][0]["status"] == "pending"
    for record in body["records"]:
        assert record["status"] == "missing", record
        assert record["found"], record  # the reason
    assert "does not exist (NXDOMAIN)" in by_purpose(body)["spf"]["found"]


def test_publishing_the_records_verifies_the_domain_and_activates_its_key(client, auth, dns_zone):
    body = add(client, auth)
    dns_zone.publish(body["records"])
    verified = verify(client, auth)
    assert verified["status"] == "verified"
    assert verified["dkim"][0]["status"] == "active"
    for record in verified["records"]:
        assert record["status"] == "ok", record
    dkim_record = by_purpose(verified)["dkim"][0]
    # Served as 255-byte strings, as zone files hold it, and found whole.
    assert dkim_record["found"] == dkim_record["value"]
    assert client.get(f"{URL}/example.com", headers=auth).get_json() == verified


def test_wrong_records_are_mismatches_that_say_what_dns_has(client, auth, dns_zone):
    add(client, auth)
    _, other_key = dkim.generate_key()
    selector = client.get(f"{URL}/example.com", headers=auth).get_json()["dkim"][0]["selector"]
    dns_zone.add_txt(f"{selector}._domainkey.example.com", dkim.record_value(other_key))
    dns_zone.add_txt("bounces.example.com", "v=spf1 include:_spf.google.com ~all")
    dns_zone.add_mx("bounces.example.com", 10, "mail.elsewhere.test")
    dns_zone.add_txt("_dmarc.example.com", "v=DMARC1; p=none")
    dns_zone.add_txt("_dmarc.example.com", "v=DMARC1; p=reject")
    body = verify(client, auth)
    assert body["status"] == "pending"
    records = by_purpose(body)
    assert records["dkim"][0]["status"] == "mismatch"
    assert other_key in records["dkim"][0]["found"]
    assert records["spf"]["status"] == "mismatch"
    assert records["spf"]["found"] == (
        "Add ip4:127.0.0.1 to it: v=spf1 include:_spf.google.com ~all"
    )
    assert records["return-path"]["status"] == "mismatch"
    assert "mail.elsewhere.test" in records["return-path"]["found"]
    assert records["dmarc"]["status"] == "mismatch"
    assert records["dmarc"]["found"].startswith("More than one DMARC record")


def test_a_subdomain_inherits_its_parents_dmarc_record(client, auth, dns_zone):
    add(client, auth, "mail.example.com")
    dns_zone.add_txt("_dmarc.example.com", "v=DMARC1; p=quarantine")
    dmarc = by_purpose(verify(client, auth, "mail.example.com"))["dmarc"]
    assert dmarc["name"] == "_dmarc.mail.example.com"
    assert dmarc["status"] == "ok"
    assert dmarc["found"] == "Inherited from _dmarc.example.com: v=DMARC1; p=quarantine"


def test_servfail_is_missing_with_the_reason_never_a_500(client, auth, dns_zone):
    body = add(client, auth)
    dns_zone.publish(body["records"])
    dns_zone.servfail.add("bounces.example.com")
    records = by_purpose(verify(client, auth))
    assert records["spf"]["status"] == "missing"
    assert "SERVFAIL" in records["spf"]["found"]
    assert records["return-path"]["status"] == "missing"
    assert records["dkim"][0]["status"] == "ok"


def test_a_timeout_is_missing_with_the_reason(app, client, auth, account, config, dns_zone):
    body = add(client, auth)
    dns_zone.publish(body["records"])
    dns_zone.silent.add("_dmarc.example.com")
    with app.app_context():
        state = verify_domain(account, "example.com", config, lambda c: DnsLookup(c, timeout=0.3))
    dmarc = next(r for r in state.records if r.purpose == "dmarc")
    assert (dmarc.status, dmarc.found) == (
        "missing",
        "The look-up of _dmarc.example.com timed out.",
    )
    assert state.status == "verified"


def test_no_resolver_answering_is_missing_not_an_error(app, client, auth, account, config):
    add(client, auth)
    nowhere = replace(config, dns_resolver="127.0.0.1:9")  # discard: nothing answers
    with app.app_context():
        state = verify_domain(account, "example.com", nowhere, lambda c: DnsLookup(c, 0.2))
    assert {r.status for r in state.records} == {"missing"}
    assert all("timed out" in r.found for r in state.records)


def test_a_domain_belongs_to_one_account(client, auth):
    add(client, auth)
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    again = client.post(URL, json={"domain": "example.com"}, headers=auth)
    assert again.status_code == 409 and "already added" in again.get_json()["message"]
    for method, path in [
        ("get", f"{URL}/example.com"),
        ("post", f"{URL}/example.com/verify"),
        ("post", f"{URL}/example.com/dkim/rotate"),
        ("delete", f"{URL}/example.com"),
    ]:
        answer = getattr(client, method)(path, headers=other_auth)
        assert answer.status_code == 404, path
        assert answer.get_json()["error"] == "not_found"
    assert client.get(URL, headers=other_auth).get_json()["items"] == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"domain": "not a domain"}, "domain"),
        ({"domain": "localhost"}, "domain"),
        ({"domain": "10.0.0.1"}, "domain"),
        ({"domain": "-bad.example.com"}, "domain"),
        ({"domain": "example.com", "returnPathDomain": "bounces.other.com"}, "returnPathDomain"),
        ({"domain": "example.com", "returnPathDomain": "example.com"}, "returnPathDomain"),
        ({"domain": "example.com", "dkimBits": 1024}, "dkimBits"),
        ({}, "domain"),
    ],
)
def test_invalid_input_is_a_400_naming_the_field(client, auth, body, field):
    response = client.post(URL, json=body, headers=auth)
    assert response.status_code == 400, response.get_json()
    assert response.get_json()["error"] == "validation_failed"
    assert response.get_json()["message"].startswith(f"{field}:")


def test_a_custom_return_path_domain_and_an_idn_domain(client, auth):
    body = add(client, auth, "bücher.example", returnPathDomain="rp.bücher.example")
    assert body["domain"] == "xn--bcher-kva.example"
    assert body["returnPathDomain"] == "rp.xn--bcher-kva.example"
    assert client.get(f"{URL}/bücher.example", headers=auth).status_code == 200


def test_rotation_moves_signing_only_once_the_new_record_verifies(client, auth, dns_zone):
    first = add(client, auth)
    dns_zone.publish(first["records"])
    old = verify(client, auth)["dkim"][0]["selector"]

    rotated = client.post(f"{URL}/example.com/dkim/rotate", headers=auth)
    assert rotated.status_code == 200
    keys = rotated.get_json()["dkim"]
    assert (keys[0]["selector"], keys[0]["status"]) == (old, "active")
    new = keys[1]["selector"]
    assert keys[1]["status"] == "pending" and new != old
    assert len(by_purpose(rotated.get_json())["dkim"]) == 2
    again = client.post(f"{URL}/example.com/dkim/rotate", headers=auth)
    assert again.status_code == 409 and new in again.get_json()["message"]

    # Not published yet: the old key keeps signing.
    body = verify(client, auth)
    assert [k["status"] for k in body["dkim"]] == ["active", "pending"]
    assert client.delete(f"{URL}/example.com/dkim/{old}", headers=auth).status_code == 409

    new_record = next(r for r in body["records"] if r["name"].startswith(new))
    dns_zone.publish([new_record])
    body = verify(client, auth)
    assert [(k["selector"], k["status"]) for k in body["dkim"]] == [
        (old, "retired"),
        (new, "active"),
    ]
    assert body["status"] == "verified"

    refused = client.delete(f"{URL}/example.com/dkim/{new}", headers=auth)
    assert refused.status_code == 409
    assert refused.get_json()["error"] == "conflict"
    assert "only active key" in refused.get_json()["message"]
    assert client.delete(f"{URL}/example.com/dkim/{old}", headers=auth).status_code == 204
    body = client.get(f"{URL}/example.com", headers=auth).get_json()
    assert [k["selector"] for k in body["dkim"]] == [new]
    assert len(by_purpose(body)["dkim"]) == 1
    missing = client.delete(f"{URL}/example.com/dkim/{old}", headers=auth)
    assert missing.status_code == 404


def test_delete_a_domain(client, auth):
    add(client, auth)
    assert client.delete(f"{URL}/example.com", headers=auth).status_code == 204
    assert client.get(f"{URL}/example.com", headers=auth).status_code == 404
    assert DkimKey.select().count() == 0
    assert client.delete(f"{URL}/example.com", headers=auth).status_code == 404
    add(client, auth)  # and it can be added again


def test_private_keys_are_encrypted_with_a_key_from_the_secret(client, auth, config):
    add(client, auth)
    (key,) = DkimKey.select()
    sealed = bytes(key.private_key)
    assert b"PRIVATE KEY" not in sealed and b"MII" not in sealed
    context = dkim.key_context(key.selector, "example.com")
    pem = sealing.unseal(sealed, config.secret_key, context)
    assert pem.startswith(b"-----BEGIN RSA PRIVATE KEY-----")
    with pytest.raises(sealing.KeyUnavailable):
        sealing.unseal(sealed, "another-secret", context)
    with pytest.raises(sealing.KeyUnavailable):
        sealing.unseal(sealed, config.secret_key, dkim.key_context(key.selector, "other.com"))


def test_the_openapi_document_describes_the_domains(client):
    spec = client.get("/openapi.json").get_json()
    for path in [
        "/v1/layang/domains",
        "/v1/layang/domains/{domain}",
        "/v1/layang/domains/{domain}/verify",
        "/v1/layang/domains/{domain}/dkim/rotate",
        "/v1/layang/domains/{domain}/dkim/{selector}",
    ]:
        assert path in spec["paths"], path
    assert "privateKey" not in str(spec) and "private_key" not in str(spec)


# -- LAYANG_REQUIRE_VERIFIED_DOMAIN ------------------------------------------------------------

SEND = "/v1/layang/transmissions"


def send(client, auth, sender):
    return client.post(
        SEND,
        json={
            "from": {"email": sender},
            "to": [{"email": "ana@rcpt.test"}],
            "subject": "Hi",
            "bodyText": "Hello",
        },
        headers=auth,
    )


def test_without_the_setting_any_domain_sends(client, auth):
    assert send(client, auth, "shop@unverified.test").status_code == 200


def test_a_live_account_must_send_from_a_verified_domain_when_required(
    app, client, auth, config, dns_zone
):
    app.config["LAYANG"] = replace(config, require_verified_domain=True)
    refused = send(client, auth, "shop@example.com")
    assert refused.status_code == 422
    body = refused.get_json()
    assert body["error"] == "sender_domain_not_verified"
    assert body["message"].startswith("from.email: example.com is not a verified sending domain")
    assert body["errors"] == {"from": {"email": [body["message"].removeprefix("from.email: ")]}}

    dns_zone.publish(add(client, auth)["records"])
    assert send(client, auth, "shop@example.com").status_code == 422  # pending still
    verify(client, auth)
    assert send(client, auth, "shop@example.com").status_code == 200
    assert send(client, auth, "news@mail.example.com").status_code == 200  # a subdomain
    assert send(client, auth, "shop@notexample.com").status_code == 422
    assert send(client, auth, "shop@com").status_code in (400, 422)


def test_sandbox_accounts_keep_their_own_rule(app, client, config):
    app.config["LAYANG"] = replace(config, require_verified_domain=True)
    trial = accounts.create_account("trial")
    trial_auth = {"Authorization": f"Bearer {accounts.create_api_key(trial)[1]}"}
    response = send(client, trial_auth, config.sandbox_sender)
    assert response.get_json()["error"] == "recipient_not_authorized"


def test_pending_claims_coexist_and_the_first_to_verify_owns_the_domain(client, auth, dns_zone):
    def account_auth(name):
        account = accounts.create_account(name, live=True)
        return {"Authorization": f"Bearer {accounts.create_api_key(account)[1]}"}

    squatter, late = account_auth("squatter"), account_auth("late")
    # Someone else claiming the domain first does not lock its owner out.
    squatted = add(client, squatter)
    mine = add(client, auth)
    assert squatted["status"] == mine["status"] == "pending"
    keys = {key["selector"] for key in squatted["dkim"]} | {key["selector"] for key in mine["dkim"]}
    assert len(keys) == 2  # each claim has its own key

    dns_zone.publish(mine["records"])
    assert verify(client, auth)["status"] == "verified"

    # The other pending claim can no longer verify, even with its own records published.
    dns_zone.publish(squatted["records"])
    refused = client.post(f"{URL}/example.com/verify", headers=squatter)
    assert refused.status_code == 409, refused.get_json()
    assert refused.get_json()["error"] == "conflict"
    assert "another account" in refused.get_json()["message"]
    assert client.get(f"{URL}/example.com", headers=squatter).get_json()["status"] == "pending"
    # Nor can a new claim be made on a verified domain.
    response = client.post(URL, json={"domain": "example.com"}, headers=late)
    assert response.status_code == 409
    assert "another account" in response.get_json()["message"]

    # Once the owner lets it go, a pending claim can verify.
    assert client.delete(f"{URL}/example.com", headers=auth).status_code == 204
    assert verify(client, squatter, "example.com")["status"] == "verified"
