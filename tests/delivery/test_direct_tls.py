"""Transport security on the direct-to-MX path, end to end: the worker resolves, fetches the
MTA-STS policy over real HTTPS, checks the MX's certificate issued by a local CA (or its TLSA
record), and delivers only as the policy allows; counted at the MX server."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from layang.models import Event, Recipient
from tests.delivery.test_direct import Running, last_event, send_to, wait_until
from tests.destinations.transport import server_context, tlsa_data
from tests.support.policy_server import PolicyServer
from tests.support.tls_pki import LocalCA
from tests.support.upstream import make_self_signed_cert

DOMAIN = "bank.test"
MX = "mx1.bank.test"
ENFORCE = f"version: STSv1\nmode: enforce\nmx: {MX}\nmax_age: 86400\n"
TESTING = ENFORCE.replace("enforce", "testing")


@pytest.fixture
def ca(tmp_path):
    return LocalCA(tmp_path / "ca")


@pytest.fixture
def bank(internet, ca, mx_config):
    """bank.test: its MX on the simulated internet, an MTA-STS policy server on port 443."""
    server = PolicyServer(ca.server_context(f"mta-sts.{DOMAIN}"))
    internet.zone.add_address(f"mta-sts.{DOMAIN}", server.address)
    internet.domain(DOMAIN, (10, MX))
    yield replace(mx_config, tls_cafile=str(ca.cafile)), server
    server.stop()


@pytest.fixture
def mx_config(config, internet):
    return internet.configure(replace(config, retry_base_seconds=60))


def publish(internet, server, policy: str) -> None:
    internet.zone.add_txt(f"_mta-sts.{DOMAIN}", "v=STSv1; id=20261125")
    server.serve(policy)


def deliver_one(client, auth, config, address="ana@bank.test"):
    send_to(client, auth, [address])
    running = Running(config)
    try:
        wait_until(lambda: Recipient.get(Recipient.address == address).status != "Injection")
    finally:
        running.stop()
    return last_event(address)


def test_enforce_with_a_valid_certificate_delivers_under_mta_sts(client, auth, internet, bank, ca):
    config, server = bank
    publish(internet, server, ENFORCE)
    mx = internet.server(MX, tls_context=ca.server_context(MX))
    status, detail = deliver_one(client, auth, config)
    assert status == "Delivery"
    assert detail["tls"]["policy"] == "mta-sts" and detail["tls"]["verified"] is True
    assert detail["tls"]["version"].startswith("TLS")
    assert mx.received[0].tls is True


@pytest.mark.parametrize("certificate", ["wrong name", "self-signed"])
def test_enforce_never_sends_over_an_unverified_session(
    client, auth, internet, bank, ca, tmp_path, certificate
):
    config, server = bank
    publish(internet, server, ENFORCE)
    if certificate == "wrong name":
        context = ca.server_context("other.example")
    else:
        context = server_context(*make_self_signed_cert(tmp_path / "self", MX))
    mx = internet.server(MX, tls_context=context)
    status, detail = deliver_one(client, auth, config)
    assert status == "Delay"
    assert detail["reply"].startswith("451 4.7.5"), detail["reply"]
    assert mx.received == []
    assert not any(verb == "MAIL" for verb, _ in mx.attempts)  # not even an envelope


def test_enforce_refuses_a_server_without_starttls(client, auth, internet, bank):
    config, server = bank
    publish(internet, server, ENFORCE)
    mx = internet.server(MX)  # offers no STARTTLS: as if a man in the middle stripped it
    status, detail = deliver_one(client, auth, config)
    assert status == "Delay" and "STARTTLS" in detail["reply"]
    assert mx.received == []


def test_testing_mode_delivers_and_records_the_failure(client, auth, internet, bank, tmp_path):
    config, server = bank
    publish(internet, server, TESTING)
    context = server_context(*make_self_signed_cert(tmp_path / "self", MX))
    mx = internet.server(MX, tls_context=context)
    status, detail = deliver_one(client, auth, config)
    assert status == "Delivery"
    assert detail["tls"]["policy"] == "mta-sts" and detail["tls"]["verified"] is False
    assert detail["tls"]["failure"]
    assert len(mx.received) == 1


def test_dane_ee_match_delivers_over_a_self_signed_certificate(
    client, auth, internet, mx_config, tmp_path
):
    internet.zone.authenticated = True
    certfile, keyfile = make_self_signed_cert(tmp_path / "dane", "unrelated.name")
    internet.zone.add_tlsa(f"_{internet.port}._tcp.{MX}", 3, 1, 1, tlsa_data(certfile, 1, 1))
    internet.domain(DOMAIN, (10, MX))
    mx = internet.server(MX, tls_context=server_context(certfile, keyfile))
    status, detail = deliver_one(client, auth, replace(mx_config, dane=True))
    assert status == "Delivery", detail
    assert detail["tls"]["policy"] == "dane" and detail["tls"]["verified"] is True
    assert len(mx.received) == 1


def test_dane_ee_mismatch_delays(client, auth, internet, mx_config, tmp_path):
    internet.zone.authenticated = True
    published, _ = make_self_signed_cert(tmp_path / "published", "a.name")
    certfile, keyfile = make_self_signed_cert(tmp_path / "served", "b.name")
    internet.zone.add_tlsa(f"_{internet.port}._tcp.{MX}", 3, 1, 1, tlsa_data(published, 1, 1))
    internet.domain(DOMAIN, (10, MX))
    mx = internet.server(MX, tls_context=server_context(certfile, keyfile))
    status, detail = deliver_one(client, auth, replace(mx_config, dane=True))
    assert status == "Delay" and detail["reply"].startswith("451 4.7.5")
    assert mx.received == []


def test_requiretls_bounces_where_the_mx_cannot_honour_it(client, auth, internet, bank, ca):
    config, _server = bank
    mx = internet.server(MX, tls_context=ca.server_context(MX))  # TLS, but no REQUIRETLS
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "PIN",
            "to": [{"email": "ana@bank.test"}],
            "bodyText": "1234",
            "optionsAttributes": {"requireTls": True},
        },
    )
    assert response.status_code == 200, response.get_json()
    running = Running(config)
    try:
        wait_until(lambda: Recipient.get().status != "Injection")
    finally:
        running.stop()
    status, detail = last_event("ana@bank.test")
    assert (status, detail["code"]) == ("Bounce", 550)
    assert "5.7.30" in detail["reply"] and detail["bounceClass"] == "block"
    assert mx.received == []
    assert Event.select().where(Event.status == "Delivery").count() == 0
    assert json.loads(Event.get(Event.status == "Bounce").detail)["reply"]
