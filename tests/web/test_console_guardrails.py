"""The console's guardrails in headless Chromium: the circuit breaker's banner, a domain's DMARC
sources charted with the unknown ones called out, and its sender requirements check."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.domain import accounts
from layang.domain.dmarc import store_reports
from layang.inbound.dmarc_reports import read_aggregate_reports
from layang.models import Recipient
from tests.conftest import drain
from tests.inbound.test_dmarc import all_four, mark_verified
from tests.support.browser import screenshot
from tests.web.test_console import sign_in

SIM = "simulator.layang.test"


@pytest.fixture
def config(config, dns_zone):
    return replace(
        config,
        dns_resolver=dns_zone.address,
        breaker_min_messages=20,
        source_pools=(("transactional", ("192.0.2.10",)),),
    )


def test_banner_dmarc_chart_and_requirements_in_a_browser(
    app, client, upstream, relay_to, dns_zone, browser, live_server
):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    added = client.post("/v1/layang/domains", headers=auth, json={"domain": "example.com"})
    selector = added.get_json()["dkim"][0]["selector"]
    mark_verified("example.com")
    for mail in all_four(selector):
        store_reports(read_aggregate_reports(mail), ["bounces.example.com"])

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, live_server, key)
    assert page.locator(".breaker-banner").count() == 0
    page.get_by_role("link", name="Domains").click()
    section = page.locator("section.domain[data-domain='example.com']")
    chart = section.locator("svg.dmarc-chart")
    assert chart.locator("g.source-known").count() == 2
    assert chart.locator("g.source-unknown").count() == 2
    assert chart.locator("g.source-known").first.get_attribute("data-ip") == "192.0.2.10"
    callout = section.locator(".unknown-sources").inner_text()
    assert callout.startswith("Unknown sources sending as your domain: 10 messages from")
    assert callout.count("203.0.113.50") == 1
    assert section.locator("table.compliance").count() == 0

    section.get_by_role("link", name="Check sender requirements").click()
    page.wait_for_load_state()
    section = page.locator("section.domain[data-domain='example.com']")
    rows = section.locator("table.compliance tbody tr")
    ids = [rows.nth(n).get_attribute("data-rule") for n in range(rows.count())]
    assert ids == ["spf", "dkim", "dmarc", "ptr", "tls", "unsubscribe", "complaint_rate"]
    # Nothing is published yet: DMARC fails and says where to publish it.
    dmarc = section.locator("tr[data-rule=dmarc]").inner_text()
    assert "fail" in dmarc and "_dmarc.example.com" in dmarc
    screenshot(page, "console-domains-guardrails")

    # 4 hard bounces in 20 messages trip the breaker: every page says so.
    to = [f"success+{n}@{SIM}" for n in range(16)] + [f"bounce+{n}@{SIM}" for n in range(4)]
    sent = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "news@example.com"},
            "subject": "News",
            "to": [{"email": address} for address in to],
            "bodyText": "Hello.",
        },
    )
    assert sent.status_code == 200
    drain(relay_to(upstream))
    page.get_by_role("link", name="Activity").click()
    banners = page.locator(".breaker-banner")
    assert banners.count() == 2  # the account and its domain
    text = banners.first.inner_text()
    assert text.startswith("Broadcast sending is paused for this account: hard-bounce rate 20 %")
    assert "layang accounts resume acme" in text
    assert "the domain example.com" in banners.nth(1).inner_text()
    screenshot(page, "console-breaker-banner")

    # A record shows its stream.
    record = Recipient.get(Recipient.address == "success+0@" + SIM)
    page.goto(f"{live_server}/console/activity/{record.id}")
    assert page.locator("dd.stream").inner_text() == "transactional"
