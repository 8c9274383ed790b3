"""The console's Inbound page in headless Chromium: mail received by a real inbound server for
the account's routes, each message with its route, its reply and every attempt to post it."""

from __future__ import annotations

import smtplib
import threading
from dataclasses import replace

import pytest

from layang.domain import accounts
from layang.inbound.server import inbound_server
from layang.webhooks.dispatcher import Dispatcher
from tests.delivery.test_crash import free_port
from tests.inbound.test_routed_mail import wait_for
from tests.support.browser import screenshot
from tests.web.test_console import sign_in

DOMAIN = "in.shop.localhost"


@pytest.fixture
def config(config):
    return replace(
        config,
        inbound_bind=f"127.0.0.1:{free_port()}",
        webhook_allow_private=True,
        webhook_retry_schedule=(0.3, 0.3),
    )


def test_the_inbound_page_shows_messages_their_route_and_attempts(
    client, config, browser, live_server, receiver
):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    assert (
        client.post("/v1/layang/inbound/domains", headers=auth, json={"domain": DOMAIN}).status_code
        == 201
    )
    assert (
        client.post(f"/v1/layang/inbound/domains/{DOMAIN}/verify", headers=auth).json["status"]
        == "verified"
    )
    route = client.post(
        "/v1/layang/inbound/routes",
        headers=auth,
        json={"match": f"support@{DOMAIN}", "action": "webhook", "url": receiver.url},
    ).json
    client.post(
        "/v1/layang/inbound/routes", headers=auth, json={"match": f"*@{DOMAIN}", "action": "hold"}
    )
    server = inbound_server(config)
    server.start()
    stop = threading.Event()
    dispatcher = Dispatcher(config, name="console-inbound")
    thread = threading.Thread(target=dispatcher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        receiver.script(503)
        with smtplib.SMTP(server.hostname, server.port, local_hostname="mx.test") as smtp:
            smtp.sendmail(
                "ana@sender.example",
                [f"support+t-7@{DOMAIN}"],
                b"From: Ana <ana@sender.example>\r\nSubject: Re: ticket 7\r\n\r\n"
                b"It works now.\r\n\r\n"
                b"On Sat, Nov 28, 2026 at 9:00 AM Shop <s@x.example> wrote:\r\n"
                b"> Does it?\r\n",
            )
            smtp.sendmail(
                "bo@sender.example",
                [f"docs@{DOMAIN}"],
                b"From: bo@sender.example\r\nSubject: Scanned invoice\r\n\r\nSee attached.\r\n",
            )
        wait_for(lambda: len(receiver.delivered()) == 1)
    finally:
        stop.set()
        thread.join(30)
        server.stop()

    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    sign_in(page, live_server, key)
    page.get_by_role("navigation").get_by_role("link", name="Inbound").click()
    page.wait_for_load_state()
    rows = page.locator("table.inbound tbody tr")
    assert rows.count() == 2
    held, posted = rows.nth(0).inner_text(), rows.nth(1).inner_text()
    assert "Scanned invoice" in held and "held" in held and f"*@{DOMAIN}" in held
    assert "Re: ticket 7" in posted and "delivered" in posted and f"support@{DOMAIN}" in posted
    assert f"support@{DOMAIN}: webhook to {receiver.url}" in page.locator("ul.routes").inner_text()
    page.get_by_role("link", name="held").click()
    assert page.locator("table.inbound tbody tr").count() == 1
    page.get_by_role("link", name="All").click()
    page.get_by_role("link", name="Re: ticket 7").click()
    page.wait_for_load_state()
    assert page.locator("pre.reply").inner_text() == "It works now."
    record = page.locator("dl.record").inner_text()
    assert f"support@{DOMAIN}: webhook" in record and "t-7" in record
    attempts = page.locator("table.attempts tbody tr")
    assert attempts.count() == 2
    assert "delivered" in attempts.nth(0).inner_text()
    assert "pending" in attempts.nth(1).inner_text() and "503" in attempts.nth(1).inner_text()
    webhook_id = receiver.delivered()[0].headers["webhook-id"]
    assert webhook_id in attempts.nth(0).inner_text()
    assert route["id"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    screenshot(page, "console-inbound-message")
