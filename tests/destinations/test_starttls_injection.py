"""Replies injected before the TLS handshake (the STARTTLS injection of CVE-2011-0411) never
count: a real MX host writes forged replies in the same write as its 220 to STARTTLS, and the
recipient is delayed, not bounced, suppressed or recorded as delivered (docs/delivery.md,
"Transport security")."""

from __future__ import annotations

from layang.models import Event, Recipient, Suppression
from tests.delivery import test_direct_tls as direct_tls
from tests.delivery.test_direct import Running, last_event, wait_until
from tests.delivery.test_direct_tls import DOMAIN, ENFORCE, MX, deliver_one, publish

ca = direct_tls.ca  # fixtures
bank = direct_tls.bank
mx_config = direct_tls.mx_config

# What the TLS phase would have answered: an EHLO offering REQUIRETLS, then a refusal.
REFUSAL = b"250-mx1.bank.test\r\n250 REQUIRETLS\r\n550 5.1.1 <ana@bank.test>: no such user\r\n"
# ... or a whole pipelined transaction, accepted.
ACCEPTANCE = (
    b"250-mx1.bank.test\r\n250-PIPELINING\r\n250 REQUIRETLS\r\n"
    b"250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n354 go ahead\r\n250 2.0.0 queued as FORGED\r\n"
)


def test_a_forged_refusal_under_mta_sts_enforce_is_a_delay_not_a_bounce(
    client, auth, internet, bank, ca
):
    config, server = bank
    publish(internet, server, ENFORCE)
    mx = internet.server(MX, tls_context=ca.server_context(MX))
    mx.starttls_injection = REFUSAL
    status, detail = deliver_one(client, auth, config)
    assert status == "Delay", detail
    assert "unsolicited bytes after its 220 to STARTTLS" in detail["reply"], detail["reply"]
    assert "no such user" not in detail["reply"]
    assert Suppression.select().count() == 0
    assert mx.received == []
    assert not any(verb == "MAIL" for verb, _ in mx.attempts)


def test_a_forged_requiretls_acceptance_is_never_a_delivery(client, auth, internet, bank, ca):
    config, _server = bank
    mx = internet.server(MX, tls_context=ca.server_context(MX))  # TLS, but no REQUIRETLS
    mx.starttls_injection = ACCEPTANCE
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "PIN",
            "to": [{"email": f"ana@{DOMAIN}"}],
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
    status, detail = last_event(f"ana@{DOMAIN}")
    assert status == "Delay", detail
    assert "FORGED" not in detail["reply"]
    assert Event.select().where(Event.status == "Delivery").count() == 0
    assert mx.received == []


def test_the_next_host_takes_the_mail_from_an_injecting_one(client, auth, internet, mx_config, ca):
    internet.domain(DOMAIN, (10, MX), (20, f"mx2.{DOMAIN}"))
    first = internet.server(MX, tls_context=ca.server_context(MX))
    first.starttls_injection = REFUSAL
    second = internet.server(f"mx2.{DOMAIN}", tls_context=ca.server_context(f"mx2.{DOMAIN}"))
    status, detail = deliver_one(client, auth, mx_config)  # no policy: opportunistic TLS
    assert status == "Delivery", detail
    assert detail["host"] == f"mx2.{DOMAIN}" and detail["tls"]["version"].startswith("TLS")
    assert first.received == [] and len(second.received) == 1
    assert Suppression.select().count() == 0
