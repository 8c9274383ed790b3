"""The console in headless Chromium: reading a message, searching, paging, local times, a
phone-sized screen, and editing templates with two people at once."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from layang.domain import accounts
from tests.conftest import b64, drain
from tests.support.browser import ARTIFACTS, screenshot
from tests.web.test_console import sign_in

MARKUP = "<img src=x onerror=alert(1)>"
PIXEL = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5E"
    "rkJggg=="
)


def _account(client):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    return key, {"Authorization": f"Bearer {key}"}


def _send(client, auth, **changes):
    body = {
        "from": {"email": "shop@acme.test", "name": "Shop"},
        "subject": "Hello",
        "to": [{"email": "ana@rcpt.test"}],
        "bodyText": "hi",
        **changes,
    }
    response = client.post("/v1/layang/transmissions", headers=auth, json=body)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["transmissionId"]


def _no_dialogs(page):
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    return dialogs


def test_reading_a_message_in_the_viewers_time_zone(
    client, upstream, relay_to, browser, live_server
):
    key, auth = _account(client)
    upstream.script_rcpt("full@rcpt.test", "550 5.1.1 no such user")
    _send(
        client,
        auth,
        subject=f"Your order {MARKUP}",
        to=[{"email": "ana@rcpt.test"}, {"email": "full@rcpt.test"}],
        bodyHtml=(
            "<h1 style='color:#236'>Thanks, Ana</h1><img alt='logo' src='cid:logo'>"
            "<img alt='remote' src='https://x.test/i.png'>"
        ),
        bodyText="Thanks, Ana (text)",
        headers=[{"name": "X-Campaign", "value": MARKUP}],
        metadata={"ref": MARKUP},
        attachments=[
            {"filename": f"{MARKUP}.txt", "value": b64(b"hello")},
            {
                "filename": "logo.png",
                "value": PIXEL,
                "contentId": "logo",
                "disposition": "inline",
            },
        ],
    )
    drain(relay_to(upstream))
    context = browser.new_context(
        viewport={"width": 1280, "height": 900}, timezone_id="Asia/Jakarta", locale="en-US"
    )
    page = context.new_page()
    dialogs = _no_dialogs(page)
    sign_in(page, live_server, key)
    page.goto(live_server + "/console/activity")

    row = page.locator("table.activity tbody tr").filter(has_text="full@rcpt.test")
    assert "shop@acme.test" in row.inner_text()
    assert row.locator(".bounce-class").inner_text() == "hard"
    assert "550 5.1.1 no such user" in row.locator("td.reason").inner_text()
    assert f"Your order {MARKUP}" in row.inner_text()  # markup shown as text
    # Times: written in UTC, shown in the browser's zone with the zone named.
    stamp = row.locator("time")
    utc = datetime.fromisoformat(stamp.get_attribute("datetime").replace("Z", "+00:00"))
    jakarta = (utc + timedelta(hours=7)).strftime("%Y-%m-%d %H:%M:%S")
    assert stamp.inner_text() == f"{jakarta} GMT+7"
    assert stamp.get_attribute("title").endswith(" UTC · shown in Asia/Jakarta")
    screenshot(page, "console-activity-reasons")

    page.get_by_role("link", name="ana@rcpt.test").click()
    page.wait_for_load_state()
    main = page.locator("main")
    assert page.locator("h1").inner_text() == f"Your order {MARKUP}"
    headers = page.locator("table.headers")
    assert headers.locator("tr").filter(has_text="X-Campaign").locator("td").inner_text() == MARKUP
    assert "Shop <shop@acme.test>" in headers.inner_text()
    assert page.locator("pre.message-text").inner_text().strip() == "Thanks, Ana (text)"
    attachments = page.locator("table.attachments tbody tr").all_inner_texts()
    assert sorted(row.split("\t")[:3] for row in attachments) == [
        [f"{MARKUP}.txt", "text/plain", "5 Bytes"],
        ["logo.png cid:logo", "image/png", "70 Bytes"],
    ]
    assert MARKUP in page.locator("dl.metadata").inner_text()
    event_time = page.locator("ol.timeline time").first
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} GMT\+7", event_time.inner_text())
    frame = page.frame_locator("iframe.message-html")
    assert frame.locator("h1").inner_text() == "Thanks, Ana"
    # The message's own images show; remote ones stay blocked until asked for.
    assert frame.locator("img[alt=logo]").evaluate("img => img.naturalWidth") == 1
    blocked = frame.locator("img[alt=remote]").evaluate("i => i.complete && i.naturalWidth === 0")
    assert blocked
    assert "Remote images are blocked" in main.inner_text()
    screenshot(page, "console-message")
    page.locator("iframe.message-html").screenshot(
        path=str(ARTIFACTS / "console-message-frame.png")
    )
    page.get_by_role("link", name="Load remote images").click()
    page.wait_for_load_state()
    assert "images=1" in page.locator("iframe.message-html").get_attribute("src")
    assert dialogs == []

    # Without scripts the UTC text the server wrote stays.
    plain = browser.new_context(java_script_enabled=False, timezone_id="Asia/Jakarta")
    plain_page = plain.new_page()
    sign_in(plain_page, live_server, key)
    plain_page.goto(live_server + "/console/activity")
    assert plain_page.locator("table.activity time").first.inner_text().endswith(" UTC")
    plain.close()
    context.close()


def test_search_paging_and_a_phone_screen(client, browser, live_server):
    key, auth = _account(client)
    _send(
        client,
        auth,
        subject="Password reset",
        to=[{"email": f"reset{n:02}@rcpt.test"} for n in range(30)],
        metadata={"flow": "reset"},
    )
    _send(client, auth, subject="Welcome aboard", to=[{"email": "welcome@other.test"}])
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, live_server, key)

    page.goto(live_server + "/console/activity?size=25")
    assert page.locator(".pager .range").inner_text() == "1\u201325"
    assert page.get_by_role("link", name="Newer").count() == 0
    page.get_by_role("link", name="Older").click()
    page.wait_for_load_state()
    assert page.locator(".pager .range").inner_text() == "26\u201331"
    assert page.locator("table.activity tbody tr").count() == 6
    page.get_by_role("link", name="Newer").click()
    page.wait_for_load_state()
    assert page.locator(".pager .range").inner_text() == "1\u201325"
    assert page.get_by_role("link", name="Newer").count() == 0
    page.select_option("select[name=size]", "50")  # the filters keep the page size
    page.get_by_role("button", name="Filter").click()
    page.wait_for_load_state()
    assert page.locator("table.activity tbody tr").count() == 31

    page.fill("input[name=subject]", "welcome")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_load_state()
    rows = page.locator("table.activity tbody tr")
    assert rows.count() == 1 and "welcome@other.test" in rows.inner_text()
    page.goto(live_server + "/console/activity")
    page.fill("input[name=recipient]", "set0")
    page.fill("input[name=metadata]", "flow=reset")
    page.get_by_role("button", name="Filter").click()
    page.wait_for_load_state()
    shown = sorted(page.locator("table.activity tbody tr td:first-child a").all_inner_texts())
    assert shown == [f"reset0{n}@rcpt.test" for n in range(10)]
    assert page.locator(".pager .range").inner_text() == "1\u201310"
    screenshot(page, "console-search")

    phone = browser.new_context(
        viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True
    )
    small = phone.new_page()
    sign_in(small, live_server, key)
    small.goto(live_server + "/console/activity")
    sizes = small.evaluate(
        """() => {
          const box = document.querySelector('.table-scroll');
          return {page: document.documentElement.scrollWidth, view: window.innerWidth,
                  box: box.clientWidth, table: box.scrollWidth};
        }"""
    )
    assert sizes["page"] <= sizes["view"] == 390, sizes
    # Each email is a card the width of the screen: nothing to scroll, its status in sight.
    assert sizes["table"] <= sizes["box"], sizes
    screenshot(small, "console-activity-phone")
    small.screenshot(path=str(ARTIFACTS / "console-activity-phone-screen.png"))
    status = small.locator("table.activity tbody tr td.status .badge").first.bounding_box()
    assert status["x"] >= 0 and status["x"] + status["width"] <= 390, status
    small.get_by_role("link", name="reset29@rcpt.test").click()
    small.wait_for_load_state()
    width = small.evaluate("() => document.documentElement.scrollWidth")
    assert width <= 390
    screenshot(small, "console-message-phone")
    phone.close()
    context.close()


def test_templates_created_edited_and_a_conflict_caught(client, browser, live_server):
    key, auth = _account(client)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    ana = context.new_page()
    sign_in(ana, live_server, key)
    ana.get_by_role("link", name="Templates").click()
    ana.get_by_role("link", name="New template").click()
    ana.fill("#id", "receipt")
    ana.fill("#name", "Receipt")
    ana.fill("#subject", "Receipt {{order}}")
    ana.fill("#bodyHtml", "<p>Hi {{user.first}}</p>\n{% if %}")
    ana.get_by_role("button", name="Create template").click()
    ana.wait_for_load_state()
    assert ana.locator("#bodyHtml-error").inner_text().startswith("bodyHtml line 2:")
    screenshot(ana, "console-template-error")
    ana.fill("#bodyHtml", "<p>Hi {{user.first}}</p>")
    ana.get_by_role("button", name="Create template").click()
    ana.wait_for_load_state()
    assert "Template receipt was created (version 1)." in ana.locator(".flash").inner_text()
    data = ana.locator("textarea[name=data]").input_value()
    assert data == '{\n  "order": "",\n  "user": {\n    "first": ""\n  }\n}'
    ana.fill("textarea[name=data]", '{"order": "A-7", "user": {"first": "Ana"}}')
    ana.get_by_role("button", name="Preview").click()
    ana.wait_for_load_state()
    assert ana.locator(".rendered-subject").inner_text() == "Receipt A-7"
    assert ana.frame_locator("iframe.rendered-html").locator("p").inner_text() == "Hi Ana"

    # Two editors open the same version; the second to save is stopped, not overwriting.
    bea = context.new_page()
    for page in (ana, bea):
        page.goto(live_server + "/console/templates/receipt/edit")
    ana.fill("#subject", "Receipt {{order}} (Ana)")
    ana.get_by_role("button", name="Save new version").click()
    ana.wait_for_load_state()
    assert "saved as version 2" in ana.locator(".flash").inner_text()
    bea.fill("#subject", "Receipt {{order}} (Bea)")
    bea.get_by_role("button", name="Save new version").click()
    bea.wait_for_load_state()
    assert "someone else saved version 2" in bea.locator(".conflict").inner_text()
    assert bea.locator("#subject").input_value() == "Receipt {{order}} (Bea)"
    bea.locator(".conflict summary").click()
    assert bea.locator("pre.current-subject").inner_text() == "Receipt {{order}} (Ana)"
    screenshot(bea, "console-template-conflict")
    current = client.get("/v1/layang/templates/receipt", headers=auth).get_json()
    assert (current["version"], current["subject"]) == (2, "Receipt {{order}} (Ana)")
    bea.get_by_role("button", name="Save new version").click()
    bea.wait_for_load_state()
    assert "saved as version 3" in bea.locator(".flash").inner_text()
    assert "version 3" in bea.locator("h1").inner_text()

    bea.get_by_role("link", name="Delete…").click()
    bea.get_by_role("button", name="Delete template").click()
    bea.wait_for_load_state()
    assert "Template receipt was deleted." in bea.locator(".flash").inner_text()
    assert client.get("/v1/layang/templates/receipt", headers=auth).status_code == 404
    context.close()
