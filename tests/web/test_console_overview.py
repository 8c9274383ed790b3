"""The overview, as a person sees it in headless Chromium: charts drawn from known mail (the
mailbox simulator's outcomes), the figures under them matching the records, rates against the
providers' thresholds, per stream and sending domain, of all mail or one stream, the queue and
what needs attention."""

from __future__ import annotations

from layang.domain import accounts
from tests.conftest import drain
from tests.delivery.test_simulator import send_over_http, settled
from tests.support.browser import overflow, screenshot
from tests.web.test_console import sign_in

REAL = "ana@rcpt.test"
SIMULATED_NEWS = ("success", "bounce", "complaint")


def figures(page, chart: str) -> dict[str, str]:
    items = page.locator(f"ul.legend[data-chart={chart}] li")
    return {
        items.nth(i).get_attribute("data-series"): items.nth(i).locator(".figure").inner_text()
        for i in range(items.count())
    }


def test_overview_charts_known_mail(client, upstream, relay_to, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    tid = send_over_http(client, auth)  # from shop@sender.test: one real, six simulated
    drain(relay_to(upstream), until=lambda: settled(client, auth, tid))
    other = send_over_http(client, auth, sender="news@Other.test", to=[REAL, "dee@rcpt.test"])
    drain(relay_to(upstream), until=lambda: settled(client, auth, other))
    # Two more wait in the queue: no worker runs after them.
    send_over_http(client, auth, to=["bo@waiting.test", "cy@waiting.test", REAL])

    errors: list[str] = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sign_in(page, live_server, key)
    assert page.url.endswith("/console/overview")
    assert page.locator("h1").inner_text() == "Overview"

    # 12 sent; delivered: the real one 3 times, success, softbounce (after a Delay), complaint.
    assert figures(page, "activity") == {
        "sent": "12",
        "delivered": "6",
        "deferred": "1",
        "bounced": "3",
        "complained": "1",
        "opened": "0",
        "clicked": "0",
    }
    assert figures(page, "bounces") == {
        "hard": "2",
        "soft": "0",
        "block": "1",
        "undetermined": "0",
    }
    # Drawn: a line per series, a point for each figure that is not zero.
    chart = page.locator("section.panel svg.chart").first
    assert chart.locator("g.series").count() == 7
    assert chart.locator("g[data-series=sent] circle title").first.text_content().endswith(": 12")
    assert page.locator("svg.chart title").first.text_content() == "Activity, last 7 days"
    assert "sent 12" in page.locator("svg.chart desc").first.text_content()

    rates = {
        r.get_attribute("data-rate"): (r.locator(".figure").inner_text(), r.get_attribute("class"))
        for r in page.locator("figure.rate").all()
    }
    assert rates == {
        "delivery": ("50.0 %", "rate rate-ok"),
        "bounce": ("25.0 %", "rate rate-bad"),
        "complaint": ("16.7 %", "rate rate-bad"),
    }

    domains = page.locator("table.by-domain tbody tr")
    assert [row.get_attribute("data-domain") for row in domains.all()] == [
        "sender.test",
        "other.test",
    ]
    sender = [c.inner_text() for c in domains.first.locator("td").all()]
    assert sender == ["sender.test", "10", "4", "1", "3", "1", "0", "0", "30.0 %", "25.0 %"]

    queue = page.locator("table.queue tbody tr")
    assert [row.get_attribute("data-destination") for row in queue.all()] == [
        "waiting.test",
        "rcpt.test",
    ]
    assert queue.first.locator("td").nth(1).inner_text() == "2"

    assert overflow(page) == []
    screenshot(page, "console-overview")
    page.set_viewport_size({"width": 390, "height": 844})
    assert overflow(page, tables_scroll=True) == []
    screenshot(page, "console-overview-390")
    assert errors == []
    page.close()


def test_an_unknown_period_is_named_and_the_default_shown(client, account, api_key):
    from tests.web.test_console import _login

    _login(client, api_key)
    page = client.get("/console/overview?period=1y")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "period: &#39;1y&#39; is not one of 24h, 7d, 30d." in text
    assert "Activity, last 7 days" in text
    for key, label in (("24h", "last 24 hours"), ("30d", "last 30 days")):
        assert f"Activity, {label}" in client.get(f"/console/overview?period={key}").get_data(
            as_text=True
        )


def stream_rows(page) -> dict[str, list[str]]:
    rows = page.locator("table.by-stream tbody tr")
    return {
        row.get_attribute("data-stream"): [c.inner_text() for c in row.locator("td").all()][1:]
        for row in rows.all()
    }


def test_the_overview_by_stream(client, upstream, relay_to, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    resets = send_over_http(client, auth)  # transactional: one real, six simulated
    news = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "news@sender.test"},
            "subject": "News",
            "to": [
                {"email": address}
                for address in (REAL, *(f"{a}@simulator.layang.test" for a in SIMULATED_NEWS))
            ],
            "bodyText": "This week.",
            "optionsAttributes": {"stream": "broadcast"},
        },
    ).get_json()["transmissionId"]
    worker = relay_to(upstream)
    drain(worker, until=lambda: settled(client, auth, resets) and settled(client, auth, news))
    # Left waiting: no worker runs after them.
    client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "news@sender.test"},
            "subject": "More news",
            "to": [{"email": "bo@waiting.test"}, {"email": "cy@waiting.test"}],
            "bodyText": "Later.",
            "optionsAttributes": {"stream": "broadcast"},
        },
    )
    send_over_http(client, auth, to=["dee@later.test"])

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sign_in(page, live_server, key)
    transactional = ["8", "4", "1", "3", "1", "0", "0", "37.5 %", "25.0 %"]
    broadcast = ["6", "3", "0", "1", "1", "0", "0", "16.7 %", "33.3 %"]
    assert stream_rows(page) == {"transactional": transactional, "broadcast": broadcast}
    assert figures(page, "activity")["sent"] == "14"
    assert page.locator("nav.streams a.active").inner_text() == "All streams"

    page.get_by_role("navigation", name="Stream").get_by_role("link", name="Broadcast").click()
    page.wait_for_load_state()
    assert "stream=broadcast" in page.url and "period=7d" in page.url
    assert figures(page, "activity") == {
        "sent": "6",
        "delivered": "3",
        "deferred": "0",
        "bounced": "1",
        "complained": "1",
        "opened": "0",
        "clicked": "0",
    }
    assert figures(page, "bounces") == {"hard": "1", "soft": "0", "block": "0", "undetermined": "0"}
    title = "Activity, last 7 days, broadcast mail"
    assert page.locator("h2#activity-title").inner_text() == title
    assert page.locator("svg.chart title").first.text_content() == title
    rates = {
        r.get_attribute("data-rate"): r.locator(".figure").inner_text()
        for r in page.locator("figure.rate").all()
    }
    assert rates == {"delivery": "50.0 %", "bounce": "16.7 %", "complaint": "33.3 %"}
    # The streams' own totals stay whole, the chosen one marked; the rest is broadcast alone.
    assert stream_rows(page) == {"transactional": transactional, "broadcast": broadcast}
    assert page.locator("table.by-stream tr.current").get_attribute("data-stream") == "broadcast"
    domain = page.locator("table.by-domain tbody tr")
    assert [c.inner_text() for c in domain.first.locator("td").all()][:2] == ["sender.test", "6"]
    queue = page.locator("table.queue tbody tr")
    assert [row.get_attribute("data-destination") for row in queue.all()] == ["waiting.test"]
    assert overflow(page) == []
    screenshot(page, "console-overview-broadcast")
    page.set_viewport_size({"width": 390, "height": 844})
    assert overflow(page, tables_scroll=True) == []
    screenshot(page, "console-overview-broadcast-390")
    page.set_viewport_size({"width": 1280, "height": 900})

    # The figures are in the page as served, not drawn by a script.
    served = page.request.get(page.url).text()
    assert 'data-stream="transactional"' in served and "37.5 %" in served
    assert "Activity, last 7 days, broadcast mail" in served

    # A period keeps the stream; "All streams" lets go of it.
    page.get_by_role("navigation", name="Period").get_by_role("link", name="24h").click()
    page.wait_for_load_state()
    assert "stream=broadcast" in page.url and "period=24h" in page.url
    assert page.locator("nav.streams a.active").inner_text() == "Broadcast"
    assert figures(page, "activity")["sent"] == "6"
    page.get_by_role("link", name="All streams").click()
    page.wait_for_load_state()
    assert "stream" not in page.url and "period=24h" in page.url
    assert figures(page, "activity")["sent"] == "14"
    queue = page.locator("table.queue tbody tr")
    assert [row.get_attribute("data-destination") for row in queue.all()] == [
        "waiting.test",
        "later.test",
    ]
    assert errors == []
    page.close()


def test_an_unknown_stream_is_named_and_all_streams_shown(client, account, api_key):
    from tests.web.test_console import _login

    _login(client, api_key)
    text = client.get("/console/overview?stream=bulk").get_data(as_text=True)
    assert "stream: &#39;bulk&#39; is not one of transactional, broadcast." in text
    assert '<h2 id="activity-title">Activity, last 7 days</h2>' in text
