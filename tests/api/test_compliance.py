"""GET /v1/layang/domains/{domain}/compliance (docs/api.md, "Sender requirements"): the large
providers' bulk-sender rules checked against a real DNS server (dnslib) and Layang's own
figures, each rule passing and each failing."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from layang.domain import breaker
from layang.domain.compliance import check_compliance
from layang.domain.intake import SubmittedMessage, accept_transmission
from layang.ids import new_id
from layang.mail.submitted import prepare_submission
from layang.models import SendingDomain
from tests.conftest import drain

DOMAIN = "example.com"
SOURCES = {"192.0.2.10": "mta1.example.net", "192.0.2.11": "mta2.example.net"}
RULES = ["spf", "dkim", "dmarc", "ptr", "tls", "unsubscribe", "complaint_rate"]
SIM = "simulator.layang.test"
RELAY, RELAY_ADDRESS = "relay.example.net", "192.0.2.25"


@pytest.fixture
def config(config, dns_zone):
    return replace(
        config,
        dns_resolver=dns_zone.address,
        inbound_host="mx.layang.test",
        relay_url="smtp://relay.example.net:25",
        source_pools=(("transactional", ("192.0.2.10",)), ("broadcast", ("192.0.2.11",))),
        public_url="https://layang.example.net",
    )


@pytest.fixture
def published(client, auth, dns_zone, upstream, relay_to):
    """example.com with every record published and verified, forward-confirmed PTRs for both
    source addresses, and ten messages delivered without a complaint."""
    added = client.post("/v1/layang/domains", headers=auth, json={"domain": DOMAIN})
    assert added.status_code == 201
    dns_zone.publish(added.get_json()["records"])
    assert client.post(f"/v1/layang/domains/{DOMAIN}/verify", headers=auth).status_code == 200
    for address, host in SOURCES.items():
        dns_zone.add_ptr(address, host)
        dns_zone.add_address(host, address)
    dns_zone.add_address(RELAY, RELAY_ADDRESS)
    dns_zone.add_ptr(RELAY_ADDRESS, RELAY)
    send(client, auth, [f"success+{n}@{SIM}" for n in range(10)])
    drain(relay_to(upstream))
    return added.get_json()


def send(client, auth, to, stream=None):
    body = {
        "from": {"email": f"news@{DOMAIN}"},
        "subject": "News",
        "to": [{"email": address} for address in to],
        "bodyText": "Hello.",
    }
    if stream:
        body["optionsAttributes"] = {"stream": stream}
    assert client.post("/v1/layang/transmissions", headers=auth, json=body).status_code == 200


def rules(client, auth):
    answer = client.get(f"/v1/layang/domains/{DOMAIN}/compliance", headers=auth)
    assert answer.status_code == 200, answer.get_json()
    body = answer.get_json()
    assert body["domain"] == DOMAIN
    assert [rule["id"] for rule in body["rules"]] == RULES
    return {rule["id"]: rule for rule in body["rules"]}


def test_every_rule_passes_for_a_domain_set_up_as_published(client, auth, published):
    found = rules(client, auth)
    assert {rule: found[rule]["status"] for rule in RULES} == dict.fromkeys(RULES, "ok")
    assert found["ptr"]["found"] == (
        "192.0.2.10 → mta1.example.net → 192.0.2.10; 192.0.2.11 → mta2.example.net → 192.0.2.11; "
        "the relay relay.example.net: 192.0.2.25 → relay.example.net → 192.0.2.25"
    )
    assert found["complaint_rate"]["found"] == "0.00 % over 24 h (0 complaints, 10 messages)"
    assert found["dmarc"]["found"] == "v=DMARC1; p=none; rua=mailto:dmarc@bounces.example.com"
    assert all(rule["title"] and rule["fix"] == "" for rule in found.values())


def _break_spf(zone, **_):
    zone.remove(f"bounces.{DOMAIN}", "TXT")


def _break_dkim(zone, published, **_):
    dkim = next(r for r in published["records"] if r["purpose"] == "dkim")
    zone.remove(dkim["name"], "TXT")


def _break_dmarc(zone, **_):
    zone.remove(f"_dmarc.{DOMAIN}", "TXT")


def _break_ptr(zone, **_):
    zone.remove("mta2.example.net", "A")
    zone.add_address("mta2.example.net", "198.51.100.7")


def _break_complaint_rate(client, auth, upstream, relay_to, **_):
    send(client, auth, [f"complaint+{n}@{SIM}" for n in range(2)])
    drain(relay_to(upstream))


@pytest.mark.parametrize(
    ("rule", "breaks", "found", "fix"),
    [
        ("spf", _break_spf, "bounces.example.com has no", "Publish TXT bounces.example.com"),
        ("dkim", _break_dkim, "._domainkey.example.com", "Publish TXT "),
        ("dmarc", _break_dmarc, "_dmarc.example.com", "Publish TXT _dmarc.example.com"),
        (
            "ptr",
            _break_ptr,
            "192.0.2.11 → mta2.example.net, which resolves to 198.51.100.7",
            "Give 192.0.2.11 a PTR record",
        ),
        ("complaint_rate", _break_complaint_rate, "16.67 % over 24 h (2 complaints", "Send only"),
    ],
)
def test_each_rule_fails_naming_what_was_found_and_the_fix(
    client, auth, account, config, dns_zone, published, upstream, relay_to, rule, breaks, found, fix
):
    breaks(
        zone=dns_zone,
        published=published,
        account=account,
        config=config,
        client=client,
        auth=auth,
        upstream=upstream,
        relay_to=relay_to,
    )
    checked = rules(client, auth)
    assert checked[rule]["status"] == "fail", checked[rule]
    assert found in checked[rule]["found"]
    assert fix in checked[rule]["fix"]
    others = {other: checked[other]["status"] for other in RULES if other != rule}
    assert others == dict.fromkeys(others, "ok")


@pytest.mark.parametrize(
    ("relay_url", "status", "found"),
    [
        ("smtp://relay.example.net:25?tls=off", "fail", "turns TLS off"),
        ("smtp://relay.example.net:25?tls=required", "ok", "is required"),
        ("smtps://relay.example.net:465", "ok", "implicit TLS"),
        ("mx:", "ok", "STARTTLS whenever offered"),
        ("capture:/tmp/outbox", "unknown", "captured"),
    ],
)
def test_the_tls_rule_follows_the_relay(account, config, published, relay_url, status, found):
    checked = check_compliance(account, DOMAIN, replace(config, relay_url=relay_url))
    tls = next(rule for rule in checked.rules if rule.id == "tls")
    assert (tls.status, found in tls.found) == (status, True)


def test_broadcast_mail_submitted_over_smtp_without_unsubscribe_headers_passes(
    client, auth, account, config, published
):
    """Layang adds the headers to each copy of it (tests/submission/test_unsubscribe.py)."""
    raw = (
        f"From: news@{DOMAIN}\r\nTo: success@{SIM}\r\nSubject: Sale\r\n"
        "X-Layang-Stream: broadcast\r\n\r\nBuy.\r\n"
    ).encode()
    tid, now = new_id(), int(time.time() * 1000)
    submitted = SubmittedMessage(
        tid, now, f"news@{DOMAIN}", (f"success@{SIM}",), prepare_submission(raw, tid, now, "")
    )
    accept_transmission(account, submitted, config)
    unsubscribe = rules(client, auth)["unsubscribe"]
    assert unsubscribe["status"] == "ok"
    found = unsubscribe["found"]
    assert "Each copy of broadcast mail, sent through the API or over SMTP" in found
    assert "<https://layang.example.net/u/…> and a mailto:" in found


def test_the_unsubscribe_rule_fails_for_a_link_that_is_not_https(account, config, published):
    checked = check_compliance(account, DOMAIN, replace(config, public_url="http://127.0.0.1"))
    unsubscribe = next(rule for rule in checked.rules if rule.id == "unsubscribe")
    assert unsubscribe.status == "fail"
    assert unsubscribe.found == (
        "The unsubscribe link in broadcast mail is http://127.0.0.1/u/…: mailbox providers "
        "offer one-click unsubscribe only for an https link."
    )
    assert "LAYANG_PUBLIC_URL" in unsubscribe.fix


def test_an_unknown_domain_is_a_404_and_no_sources_is_unknown(client, auth, account, config):
    answer = client.get("/v1/layang/domains/nowhere.test/compliance", headers=auth)
    assert answer.status_code == 404
    client.post("/v1/layang/domains", headers=auth, json={"domain": DOMAIN})
    checked = check_compliance(account, DOMAIN, replace(config, source_pools=()))
    ptr = next(rule for rule in checked.rules if rule.id == "ptr")
    assert ptr.status == "unknown"
    assert SendingDomain.select().count() == 1
    assert breaker.rates_of(account.id, DOMAIN).sent == 0


def ptr_rule(account, config) -> object:
    return next(
        rule for rule in check_compliance(account, DOMAIN, config).rules if rule.id == "ptr"
    )


def test_the_ptr_rule_checks_the_source_addresses_setting(account, config, dns_zone, published):
    """LAYANG_SOURCE_ADDRESSES, the setting docs/deploy.md names, without any pools."""
    direct = replace(
        config,
        relay_url="mx:",
        source_pools=(),
        source_addresses=(("192.0.2.10", "mta1.example.net"), ("192.0.2.11", "")),
    )
    ptr = ptr_rule(account, direct)
    assert (ptr.status, ptr.fix) == ("ok", "")
    assert ptr.found == (
        "192.0.2.10 → mta1.example.net → 192.0.2.10; 192.0.2.11 → mta2.example.net → 192.0.2.11"
    )
    dns_zone.remove("11.2.0.192.in-addr.arpa", "PTR")
    ptr = ptr_rule(account, direct)
    assert ptr.status == "fail" and "192.0.2.11: " in ptr.found
    assert ptr.fix.startswith("Give 192.0.2.11 a PTR record")


def test_the_ptr_rule_checks_a_smarthosts_own_addresses(account, config, dns_zone, published):
    relayed = replace(config, source_pools=(), source_addresses=())
    ptr = ptr_rule(account, relayed)
    assert ptr.status == "ok"
    assert ptr.found == "the relay relay.example.net: 192.0.2.25 → relay.example.net → 192.0.2.25"
    dns_zone.remove(RELAY, "A")
    dns_zone.add_address(RELAY, "192.0.2.26")
    ptr = ptr_rule(account, relayed)
    assert ptr.status == "fail" and "192.0.2.26: " in ptr.found and "192.0.2.26" in ptr.fix
    # A relay on a private network: its PTR is not what receivers see.
    ptr = ptr_rule(account, replace(relayed, relay_url="smtp://10.1.2.3:25"))
    assert ptr.status == "unknown" and "10.1.2.3 is not a public address" in ptr.found


def test_without_any_source_address_the_rule_names_the_setting(account, config, published):
    ptr = ptr_rule(account, replace(config, relay_url="mx:", source_pools=(), source_addresses=()))
    assert ptr.status == "unknown"
    assert "LAYANG_SOURCE_ADDRESSES" in ptr.fix and "POOLS" not in ptr.fix
