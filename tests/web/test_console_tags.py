"""Tags in the console, in headless Chromium: the overview's figures per tag, a tag's link to
its records, and the Activity page's Tag filter."""

from __future__ import annotations

from layang.domain import accounts
from tests.conftest import drain
from tests.support.browser import overflow
from tests.web.test_console import sign_in


def send(client, auth, to, tags=None):
    body = {"from": "shop@sender.test", "subject": f"To {to}", "bodyText": "Hi", "to": to}
    if tags is not None:
        body["tags"] = tags
    response = client.post("/v1/layang/transmissions", headers=auth, json=body)
    assert response.status_code == 200, response.get_json()


def recipients(page) -> list[str]:
    return sorted(a.inner_text() for a in page.locator("table.activity td.recipient a").all())


def test_tags_in_the_overview_and_the_activity_filter(
    client, upstream, relay_to, browser, live_server
):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 <gone@rcpt.test>: no such user")
    send(client, auth, ["ana@rcpt.test", "gone@rcpt.test"], ["welcome"])
    send(client, auth, ["budi@rcpt.test"], ["receipt", "welcome"])
    send(client, auth, ["citra@rcpt.test"])
    drain(relay_to(upstream))

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(page, live_server, key)
    rows = page.locator("table.by-tag tbody tr")
    assert [row.get_attribute("data-tag") for row in rows.all()] == ["welcome", "receipt"]
    cells = [c.inner_text() for c in rows.first.locator("td").all()]
    assert cells[:3] == ["welcome", "3", "2"]  # sent, delivered
    assert overflow(page) == []

    rows.first.locator("a").click()
    page.wait_for_load_state()
    assert "/console/activity" in page.url and "tag=welcome" in page.url
    assert recipients(page) == ["ana@rcpt.test", "budi@rcpt.test", "gone@rcpt.test"]
    assert page.locator("input[name=tag]").input_value() == "welcome"

    page.fill("input[name=tag]", "receipt")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_load_state()
    assert recipients(page) == ["budi@rcpt.test"]
    badges = page.locator("table.activity a.badge.tag").all()
    assert [b.inner_text() for b in badges] == ["receipt", "welcome"]

    page.get_by_role("link", name="Clear").click()
    page.wait_for_load_state()
    assert len(recipients(page)) == 4
