"""Tracking domains in the console, in headless Chromium, against a real DNS server: added,
its CNAME shown, verified once published, removed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.domain import accounts
from tests.support.browser import overflow
from tests.web.test_console import sign_in


@pytest.fixture
def config(config, dns_zone):
    return replace(config, dns_resolver=dns_zone.address, public_url="https://track.layang.test")


def test_add_verify_and_remove_a_tracking_domain(browser, live_server, dns_zone, app):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(page, live_server, key)
    page.goto(live_server + "/console/domains")
    page.get_by_role("link", name="Tracking domains").click()
    page.wait_for_load_state()
    page.fill("input[name=domain]", "Links.Shop.Example")
    page.get_by_role("button", name="Add").click()
    page.wait_for_load_state()
    row = page.locator("table.tracking-domains tr[data-domain='links.shop.example']")
    assert row.locator(".badge").inner_text() == "pending"
    assert row.locator("code.record").inner_text() == "links.shop.example CNAME track.layang.test"
    assert overflow(page) == []

    row.get_by_role("button", name="Verify").click()
    page.wait_for_load_state()
    assert "not there yet" in page.locator(".flash").first.inner_text()
    dns_zone.add_cname("links.shop.example", "track.layang.test")
    row = page.locator("table.tracking-domains tr[data-domain='links.shop.example']")
    row.get_by_role("button", name="Verify").click()
    page.wait_for_load_state()
    assert "is verified" in page.locator(".flash").first.inner_text()
    row = page.locator("table.tracking-domains tr[data-domain='links.shop.example']")
    assert row.locator(".badge").inner_text() == "verified"

    row.get_by_role("button", name="Remove").click()
    page.wait_for_load_state()
    assert page.locator("table.tracking-domains").count() == 0
