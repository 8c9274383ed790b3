"""The mailbox simulator seen where a newcomer looks: each address's outcome in the console."""

from __future__ import annotations

from tests.conftest import drain
from tests.delivery.test_simulator import EXPECTED, activity, send_over_http, settled
from tests.support.browser import screenshot
from tests.web.test_console import sign_in
from tests.web.test_console_reading import _account


def test_each_simulator_outcome_shows_in_the_console(
    client, upstream, relay_to, browser, live_server
):
    key, auth = _account(client)
    tid = send_over_http(client, auth, to=list(EXPECTED))
    drain(relay_to(upstream), until=lambda: settled(client, auth, tid))
    assert upstream.connections == 0

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    sign_in(page, live_server, key)
    page.goto(live_server + "/console/activity")
    rows = page.locator("table.activity tbody tr")
    for address, (status, _, classes) in EXPECTED.items():
        # "bounce@" is part of "softbounce@": match the recipient's link exactly.
        row = rows.filter(has=page.get_by_role("link", name=address, exact=True))
        assert row.locator(".badge").first.inner_text() == status, address
        if status == "Bounce":
            assert row.locator(".bounce-class").inner_text() == classes[-1], address
    complained = rows.filter(
        has=page.get_by_role("link", name="complaint@simulator.layang.test", exact=True)
    )
    assert complained.locator(".badge-complaint").inner_text() == "Complaint"
    screenshot(page, "console-simulator")

    complaint = activity(client, auth, tid)["complaint@simulator.layang.test"]
    page.get_by_role("link", name="complaint@simulator.layang.test", exact=True).click()
    page.wait_for_load_state()
    timeline = page.locator("ol.timeline").inner_text()
    assert [e["status"] for e in complaint["events"]] == ["Injection", "Delivery", "Complaint"]
    for kind in ("Injection", "Delivery", "Complaint"):
        assert kind in timeline
    screenshot(page, "console-simulator-complaint")
    page.close()
