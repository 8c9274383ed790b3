"""The console's transport security, in headless Chromium: the TLS of each delivery attempt in
a message's timeline, and the Security page's per-domain policies and failures."""

from __future__ import annotations

import json

from layang.destinations import tlsrpt
from layang.destinations.mta_sts import StsPolicy
from layang.destinations.policy import TransportPolicy
from layang.domain import accounts
from layang.models import Event, Recipient
from tests.conftest import drain
from tests.support.browser import screenshot
from tests.web.test_console_suppressions import sign_in

STS = TransportPolicy(
    "bank.test",
    kind="mta-sts",
    mode="enforce",
    sts=StsPolicy("1", "enforce", ("mx1.bank.test",), 86400, "version: STSv1\nmode: enforce\n"),
)
ATTEMPTS = [
    (
        "Delay",
        {
            "reply": "451 4.7.5 the certificate of mx2.bank.test is not valid for that name",
            "host": "mx2.bank.test",
            "tls": {
                "version": "TLSv1.3",
                "cipher": "TLS_AES_256_GCM_SHA384",
                "verified": False,
                "policy": "mta-sts",
            },
            "attempt": 1,
        },
    ),
    (
        "Delivery",
        {
            "reply": "250 2.0.0 OK",
            "host": "mx1.bank.test",
            "tls": {
                "version": "TLSv1.3",
                "cipher": "TLS_AES_128_GCM_SHA256",
                "verified": True,
                "policy": "mta-sts",
            },
            "attempt": 2,
        },
    ),
]


def send(client, auth, to):
    body = {
        "from": {"email": "shop@acme.test"},
        "subject": "Your statement",
        "to": [{"email": to}],
        "bodyText": "hi",
    }
    return client.post("/v1/layang/transmissions", headers=auth, json=body).get_json()


def test_timeline_and_security_page_in_a_browser(client, upstream, relay_to, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    send(client, auth, "ana@bank.test")
    send(client, auth, "old@plain.test")
    drain(relay_to(upstream))
    # What the delivery engine records for MX attempts (docs/delivery.md: the event's "tls").
    ana = Recipient.get(Recipient.address == "ana@bank.test")
    for offset, (status, detail) in enumerate(ATTEMPTS, start=1):
        Event.create(
            recipient=ana,
            status=status,
            detail=json.dumps(detail),
            created_at=ana.updated_at + offset,
        )
    for _ in range(3):
        tlsrpt.record_session("bank.test", STS, "mx1.bank.test", True)
    for _ in range(2):
        tlsrpt.record_session(
            "bank.test",
            STS,
            "mx2.bank.test",
            False,
            "certificate-host-mismatch",
            "the certificate of mx2.bank.test is not valid for that name",
        )
    tlsrpt.record_session("plain.test", TransportPolicy("plain.test"), "mx.plain.test", True)
    tlsrpt.record_session("elsewhere.test", STS, "mx.elsewhere.test", True)  # not acme's

    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_in(page, live_server, key)
    page.goto(f"{live_server}/console/activity/{ana.id}")
    tls = page.locator("ol.timeline dd.detail-tls")
    assert tls.count() == 2  # the relay's own Delivery records no TLS: nothing shown for it
    first, second = tls.nth(0).inner_text(), tls.nth(1).inner_text()
    assert "TLSv1.3" in first and "certificate not verified" in first
    assert "policy mta-sts" in first
    assert "TLS_AES_128_GCM_SHA256" in second and "certificate verified" in second
    screenshot(page, "console-timeline-tls")

    page.get_by_role("link", name="Security").click()
    page.wait_for_load_state()
    rows = page.locator("table.security tbody tr")
    assert rows.count() == 2
    bank = rows.nth(0).inner_text()
    assert "bank.test" in bank and "MTA-STS" in bank
    assert "3 met, 2 failed" in bank
    assert "certificate-host-mismatch at mx2.bank.test, 2 sessions" in bank
    plain = rows.nth(1).inner_text()
    assert "plain.test" in plain and "none (opportunistic)" in plain and "1 met" in plain
    assert "elsewhere.test" not in page.content()
    screenshot(page, "console-security")


def test_security_page_without_sessions(client, live_server, browser):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    page = browser.new_context().new_page()
    sign_in(page, live_server, key)
    page.goto(f"{live_server}/console/security")
    assert "No mail to outside mail servers" in page.inner_text("main")


def test_the_security_page_lists_every_session_plaintext_ones_as_no_tls(
    client, config, internet, tmp_path, browser, live_server
):
    """Issue 43 item 4: plaintext direct-to-MX deliveries appeared nowhere; every session's
    TLS outcome is listed, plaintext as "no TLS", TLS ones as met."""
    from dataclasses import replace

    from tests.delivery.test_direct import Running, send_to, settled, wait_until
    from tests.support.tls_pki import LocalCA

    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    internet.server("mx.plain.test")  # offers no STARTTLS
    internet.domain("plain.test", (10, "mx.plain.test"))
    ca = LocalCA(tmp_path / "ca")
    internet.server("mx.secure.test", tls_context=ca.server_context("mx.secure.test"))
    internet.domain("secure.test", (10, "mx.secure.test"))
    addresses = ["ana@plain.test", "bo@plain.test", "cy@secure.test"]
    send_to(client, auth, addresses)
    mx_config = internet.configure(replace(config, retry_base_seconds=60))
    running = Running(replace(mx_config, tls_cafile=str(ca.cafile)))
    try:
        wait_until(lambda: settled(addresses), 30, "not every recipient settled")
    finally:
        running.stop()
    assert {Recipient.get(Recipient.address == a).status for a in addresses} == {"Delivery"}

    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    sign_in(page, live_server, key)
    page.goto(f"{live_server}/console/security")
    rows = {
        row.locator("td").first.inner_text(): row.inner_text()
        for row in page.locator("table.security tbody tr").all()
    }
    assert set(rows) == {"plain.test", "secure.test"}, rows
    plain = rows["plain.test"]
    assert "none (opportunistic)" in plain and "no TLS" in plain
    assert "0 met" in plain and "failed" not in plain
    assert "mx.plain.test does not offer STARTTLS" in plain
    secure = rows["secure.test"]
    assert "1 met" in secure and "no TLS" not in secure
    screenshot(page, "console-security-no-tls")
