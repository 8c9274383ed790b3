"""The console's Webhooks page in headless Chromium: add an endpoint, see its secret once, send a
test event to a real receiver, see the attempt, disable and enable."""

from __future__ import annotations

import re
import time
from dataclasses import replace

import pytest
from standardwebhooks import Webhook

from layang.domain import accounts
from layang.webhooks.dispatcher import Dispatcher
from tests.support.browser import overflow, screenshot
from tests.support.webhook_receiver import Receiver
from tests.web.test_console import _login, sign_in


@pytest.fixture
def config(config):
    return replace(config, webhook_allow_private=True)


def test_webhooks_page_in_a_browser(app, config, browser, live_server, receiver: Receiver):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server)
    page = context.new_page()
    sign_in(page, live_server, key)
    page.get_by_role("link", name="Webhooks").click()
    # The form reads like the others: a styled URL box, each checkbox beside its label.
    url_box = page.locator("input[name=url]").bounding_box()
    assert url_box["width"] > 300 and url_box["height"] > 30
    for kind in ("Delivery", "Bounce"):
        box = page.get_by_label(kind).bounding_box()
        text = page.locator("fieldset.events label", has_text=kind).first.bounding_box()
        assert box["x"] - text["x"] < 4 and text["width"] < 140, kind
    assert overflow(page) == []
    assert page.locator(".empty").inner_text() == "No webhook endpoints yet."

    page.fill("input[name=url]", "https://169.254.169.254/latest/meta-data")
    page.get_by_role("button", name="Add endpoint").click()
    page.wait_for_load_state()
    assert "a cloud metadata address" in page.locator(".flash-error").inner_text()
    assert page.locator(".empty").inner_text() == "No webhook endpoints yet."

    page.fill("input[name=url]", receiver.url)
    page.get_by_label("Delivery").check()
    page.get_by_label("Bounce").check()
    page.get_by_role("button", name="Add endpoint").click()
    page.wait_for_load_state()
    secret = page.locator("code.secret-value").inner_text()
    assert secret.startswith("whsec_")
    page.locator("section.secret").get_by_role("button", name="Copy").click()
    assert page.evaluate("() => navigator.clipboard.readText()") == secret
    assert overflow(page) == []
    section = page.locator("section.webhook")
    assert "Events: Delivery, Bounce" in section.inner_text()
    screenshot(page, "console-webhooks-added")
    page.goto(live_server + "/console/webhooks")
    assert page.locator("code.secret-value").count() == 0  # shown once

    page.get_by_role("button", name="Send test").click()
    page.wait_for_load_state()
    assert "A test event is queued" in page.locator(".flash").inner_text()
    dispatcher = Dispatcher(config, name="console-test")
    try:
        deadline = time.monotonic() + 15
        while not receiver.delivered() and time.monotonic() < deadline:
            dispatcher.step()
            time.sleep(0.02)
    finally:
        dispatcher.close()
    (request,) = receiver.delivered()
    assert Webhook(secret).verify(request.body, request.headers)["events"][0]["type"] == "Test"
    page.reload()
    row = page.locator("table.attempts tbody tr")
    assert row.count() == 1
    assert "delivered" in row.inner_text() and "204" in row.inner_text()
    screenshot(page, "console-webhooks-delivered")

    page.get_by_role("button", name="Disable").click()
    page.wait_for_load_state()
    assert page.locator("section.webhook h2 .badge").inner_text() == "disabled"
    assert "Disabled in the console." in page.locator("section.webhook").inner_text()
    page.get_by_role("button", name="Enable").click()
    page.wait_for_load_state()
    assert page.locator("section.webhook h2 .badge").inner_text() == "enabled"


def test_forms_need_the_csrf_token(client, account, api_key):
    _login(client, api_key)
    page = client.get("/console/webhooks").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    forged = client.post("/console/webhooks", data={"url": "https://hooks.example.org/h"})
    assert forged.status_code == 400
    assert "hooks.example.org" not in client.get("/console/webhooks").get_data(as_text=True)
    added = client.post(
        "/console/webhooks", data={"url": "https://hooks.example.org/h", "csrf_token": token}
    )
    assert added.status_code == 200 and "whsec_" in added.get_data(as_text=True)
