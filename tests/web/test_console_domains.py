"""The console's Domains page in headless Chromium: add a domain, copy its records, publish them
in a real DNS server, verify, rotate."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.domain import accounts
from layang.domain.sending_domains import get_domain
from tests.support.browser import screenshot
from tests.web.test_console import sign_in


@pytest.fixture
def config(config, dns_zone):
    return replace(config, dns_resolver=dns_zone.address)


def test_domains_page_in_a_browser(app, config, dns_zone, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server)
    page = context.new_page()
    sign_in(page, live_server, key)
    page.get_by_role("link", name="Domains").click()
    assert page.locator(".empty").inner_text() == "No sending domains yet."

    page.fill("input[name=domain]", "Example.com")
    page.get_by_role("button", name="Add domain").click()
    page.wait_for_load_state()
    assert "example.com was added" in page.locator(".flash").inner_text()
    section = page.locator("section.domain[data-domain='example.com']")
    assert section.locator("h2 .badge").inner_text() == "pending"
    dkim_row = section.locator("tr[data-purpose=dkim]")
    with app.app_context():
        state = get_domain(acme, "example.com", config)
    record = state.records[0]
    assert record.name in dkim_row.inner_text()

    dkim_row.get_by_role("button", name="Copy").nth(1).click()
    assert page.evaluate("navigator.clipboard.readText()") == record.value
    dkim_row.get_by_role("button", name="Copy as 255-byte strings").click()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith('"v=DKIM1; k=rsa; p=') and '" "' in copied
    assert copied.replace('" "', "").strip('"') == record.value
    screenshot(page, "console-domains-pending")

    # The development defaults are called what they are, with the settings that make them real.
    notice = page.locator(".development-values").inner_text()
    assert "MX 10 127.0.0.1" in notice and "ip4:127.0.0.1" in notice
    assert "bounces.127.0.0.1" in notice and "LAYANG_PUBLIC_URL" in notice

    # Nothing published yet: the answer to Verify is a warning naming what is missing.
    section.get_by_role("button", name="Verify").click()
    page.wait_for_load_state()
    flashed = page.locator("p[role=status].flash")
    assert flashed.get_attribute("class") == "flash flash-warn"
    assert "4 not found as expected: DKIM, SPF, DMARC, RETURN-PATH" in flashed.inner_text()
    page.goto(live_server + "/console/overview")
    attention = page.locator("section.attention").inner_text()
    assert "example.com is not verified" in attention
    assert "example.com: DNS records missing or wrong" in attention
    page.goto(live_server + "/console/domains")

    dns_zone.publish({"type": r.type, "name": r.name, "value": r.value} for r in state.records)
    section = page.locator("section.domain[data-domain='example.com']")
    section.get_by_role("button", name="Verify").click()
    page.wait_for_load_state()
    assert page.locator("p[role=status].flash").get_attribute("class") == "flash flash-message"
    page.goto(live_server + "/console/overview")
    assert page.locator("section.attention").count() == 0
    page.goto(live_server + "/console/domains")
    section = page.locator("section.domain[data-domain='example.com']")
    assert section.locator("h2 .badge").inner_text() == "verified"
    assert set(section.locator("table.records .badge").all_inner_texts()) == {"ok"}
    assert section.locator("table.keys .badge").all_inner_texts() == ["active"]
    screenshot(page, "console-domains-verified")

    section.get_by_role("button", name="Rotate DKIM key").click()
    page.wait_for_load_state()
    section = page.locator("section.domain[data-domain='example.com']")
    assert section.locator("table.keys .badge").all_inner_texts() == ["active", "pending"]
    assert section.locator("tr[data-purpose=dkim]").count() == 2
    html = page.content()
    assert "PRIVATE" not in html
    section.get_by_role("button", name="Delete key").click()
    page.wait_for_load_state()
    assert "was deleted" in page.locator(".flash").inner_text()
    section = page.locator("section.domain[data-domain='example.com']")
    assert section.locator("table.keys .badge").all_inner_texts() == ["active"]

    # Another account sees nothing of it, and cannot act on it.
    other_key = accounts.create_api_key(accounts.create_account("other", live=True))[1]
    other = browser.new_context().new_page()
    sign_in(other, live_server, other_key)
    other.goto(live_server + "/console/domains")
    assert other.locator("section.domain").count() == 0
    assert other.locator(".empty").inner_text() == "No sending domains yet."
    context.close()
