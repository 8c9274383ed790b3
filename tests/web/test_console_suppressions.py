"""The console's Suppressions page in headless Chromium, its CSRF protection, and the
unsubscribe page a recipient sees."""

from __future__ import annotations

import re

from layang.domain import accounts
from layang.models import Suppression
from tests.conftest import drain
from tests.support.browser import screenshot


def sign_in(page, base, key):
    page.goto(base + "/console/login")
    page.fill("input[type=password]", key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def login(client, key):
    page = client.get("/console/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert (
        client.post("/console/login", data={"csrf_token": token, "api_key": key}).status_code == 302
    )


def test_suppressions_page_in_a_browser(client, upstream, relay_to, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    upstream.script_rcpt("gone@rcpt.test", "550 5.1.1 <gone@rcpt.test>: no such user")
    sent = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@acme.test"},
            "subject": "Welcome",
            "to": [{"email": "gone@rcpt.test"}],
            "bodyText": "hi",
        },
    ).get_json()
    drain(relay_to(upstream))
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    client.put("/v1/layang/suppressions/secret@other.test", json={}, headers=other_auth)

    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    sign_in(page, live_server, key)
    page.get_by_role("link", name="Suppressions").click()
    page.wait_for_load_state()
    rows = page.locator("table.list tbody tr")
    assert rows.count() == 1  # the other account's entry is not shown
    assert "hard_bounce" in rows.first.inner_text() and "no such user" in rows.first.inner_text()

    page.fill("form[aria-label='Add an address'] input[name=email]", "bea@rcpt.test")
    page.fill("form[aria-label='Add an address'] input[name=note]", "asked by phone")
    page.get_by_role("button", name="Suppress").click()
    page.wait_for_load_state()
    assert "bea@rcpt.test is suppressed" in page.locator(".flash").inner_text()
    assert rows.count() == 2
    screenshot(page, "console-suppressions")

    page.fill("form[aria-label='Search'] input[name=email]", "GONE")
    page.get_by_role("button", name="Search").click()
    page.wait_for_load_state()
    assert rows.count() == 1
    page.select_option("select[name=reason]", "manual")
    page.fill("form[aria-label='Search'] input[name=email]", "")
    page.get_by_role("button", name="Search").click()
    page.wait_for_load_state()
    assert rows.count() == 1 and "bea@rcpt.test" in rows.first.inner_text()

    page.get_by_role("link", name="Clear").click()
    page.wait_for_load_state()
    row = rows.filter(has_text="gone@rcpt.test")
    row.get_by_role("link", name="Activity").click()
    page.wait_for_load_state()
    assert f"transmission={sent['transmissionId']}" in page.url
    assert "gone@rcpt.test" in page.locator("table.list").inner_text()

    page.get_by_role("link", name="Suppressions").click()
    rows.filter(has_text="gone@rcpt.test").get_by_role("button", name="Remove").click()
    page.wait_for_load_state()
    assert "taken off the list" in page.locator(".flash").inner_text()
    assert [s.email for s in Suppression.select().where(Suppression.account == acme.id)] == [
        "bea@rcpt.test"
    ]


def test_suppression_forms_need_csrf_and_a_full_key(client, account, api_key):
    login(client, api_key)
    refused = client.post("/console/suppressions", data={"email": "x@rcpt.test"})
    assert refused.status_code == 400
    page = client.get("/console/suppressions").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    added = client.post("/console/suppressions", data={"email": "x@rcpt.test", "csrf_token": token})
    assert added.status_code == 302 and Suppression.select().count() == 1

    read_key = accounts.create_api_key(account, scope="read")[1]
    reader = client.application.test_client()
    login(reader, read_key)
    page = reader.get("/console/suppressions").get_data(as_text=True)
    assert "x@rcpt.test" in page
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    removed = reader.post(
        "/console/suppressions/remove", data={"email": "x@rcpt.test", "csrf_token": token}
    )
    assert removed.status_code == 403 and Suppression.select().count() == 1


def test_the_unsubscribe_page_in_a_browser(client, auth, upstream, relay_to, browser, live_server):
    client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "news@shop.test"},
            "subject": "This week",
            "to": [{"email": "ana@rcpt.test"}],
            "bodyText": "news",
            "optionsAttributes": {"transactional": False},
        },
    )
    drain(relay_to(upstream))
    header = upstream.received[0].message["List-Unsubscribe"]
    path = re.search(r"<http://[^/]+(/u/[^>]+)>", header).group(1)

    page = browser.new_context().new_page()
    page.goto(live_server + path)
    assert "news@shop.test" in page.inner_text("main") and "ana@rcpt.test" in page.inner_text(
        "main"
    )
    screenshot(page, "unsubscribe")
    assert Suppression.select().count() == 0
    page.get_by_role("button", name="Unsubscribe").click()
    page.wait_for_load_state()
    assert page.url == live_server + path  # no redirect anywhere
    assert "You are unsubscribed" in page.inner_text("h1")
    screenshot(page, "unsubscribe-done")
    assert Suppression.get().reason == "unsubscribe"
    page.goto(live_server + path)
    assert "You are unsubscribed" in page.inner_text("h1")
