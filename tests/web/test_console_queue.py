"""The console's Queue page in headless Chromium: the account's waiting mail by recipient
domain, and the sites that hold it back flagged in the navigation."""

from __future__ import annotations

from layang.clock import now_ms
from layang.destinations import sites
from layang.destinations.mx import remember_sites
from layang.domain import accounts
from tests.support.browser import screenshot
from tests.support.internet import SLOW_DOWN
from tests.web.test_console import sign_in


def test_the_queue_page_shows_waiting_mail_and_what_holds_it_back(client, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    response = client.post(
        "/v1/layang/transmissions",
        headers={"Authorization": f"Bearer {key}"},
        json={
            "from": {"email": "shop@acme.test"},
            "subject": "Hello",
            "to": [{"email": f"r{i}@gmail.example"} for i in range(3)]
            + [{"email": "ana@small.example"}],
            "bodyText": "hi",
        },
    )
    assert response.status_code == 200
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    sign_in(page, live_server, key)
    queue_link = page.get_by_role("navigation").get_by_role("link", name="Queue")
    assert queue_link.inner_text().strip() == "Queue"  # nothing holds mail back yet
    queue_link.click()
    page.wait_for_load_state()
    rows = page.locator("table.queue tbody tr")
    assert rows.count() == 2
    first = rows.nth(0).inner_text()
    assert "gmail.example" in first and "3" in first and "ok" in first
    assert page.locator("section.attention").count() == 0

    remember_sites([("gmail.example", "google.com", now_ms() + 3_600_000)])
    sites.slow_down("google.com", SLOW_DOWN, 5)
    page.reload()
    assert page.get_by_role("navigation").get_by_role("link", name="Queue").inner_text() == (
        "Queue 1"
    )
    attention = page.locator("section.attention").inner_text()
    assert "gmail.example: site google.com is throttled until 20" in attention
    assert "421 4.7.28" in attention and "3 emails wait" in attention
    row = page.locator("table.queue tbody tr").filter(has_text="gmail.example").inner_text()
    assert "google.com" in row and "throttled" in row
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 1280
    screenshot(page, "console-queue")
