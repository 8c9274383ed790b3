"""Every console page at 1280 and 390 px wide, with long addresses, subjects and replies: nothing
clipped, no table wider than its box at 1280, no console error; a screenshot of each in
test-artifacts/. And the Activity table read at a glance."""

from __future__ import annotations

import pytest

from layang.domain import accounts
from tests.conftest import drain
from tests.support.browser import overflow, screenshot
from tests.web.test_console import SHIPPED, sign_in

LONG_REPLY = (
    "550 5.1.1 <a.very.long.mailbox.name.for.testing@rcpt.test>: Recipient address rejected: "
    "User unknown in virtual mailbox table; see https://support.rcpt.test/mail/errors/5.1.1 "
    "for the reasons this can happen and what the sender may do about it"
)
LONG_ADDRESS = "a.very.long.mailbox.name.for.testing@rcpt.test"
LONG_SUBJECT = "Your order A-1234567 has shipped and is on its way: track it, change it, or ask us"

PAGES = [
    ("overview", "/console/overview"),
    ("activity", "/console/activity"),
    ("recipients", "/console/recipients"),
    ("templates", "/console/templates"),
    ("template", "/console/templates/shipped"),
    ("new-template", "/console/new-template"),
    ("domains", "/console/domains"),
    ("suppressions", "/console/suppressions"),
    ("webhooks", "/console/webhooks"),
]


@pytest.fixture
def signed_in_page(client, upstream, relay_to, browser, live_server):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    upstream.script_rcpt(LONG_ADDRESS, LONG_REPLY)
    for to in ([LONG_ADDRESS], ["ana@rcpt.test", "success@simulator.layang.test"]):
        response = client.post(
            "/v1/layang/transmissions",
            headers=auth,
            json={
                "from": {"email": "orders@shop.acme.test", "name": "Acme Shop"},
                "subject": LONG_SUBJECT,
                "to": [{"email": address} for address in to],
                "bodyText": "hi",
                "bodyHtml": "<p>hi</p>",
            },
        )
        assert response.status_code == 200, response.get_json()
    drain(relay_to(upstream))
    assert client.post("/v1/layang/templates", json=SHIPPED, headers=auth).status_code == 201
    assert client.post("/v1/layang/domains", json={"domain": "shop.acme.test"}, headers=auth)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, live_server, key)
    yield page, live_server, errors
    context.close()


def test_every_page_fits_1280_and_390(signed_in_page):
    page, base, errors = signed_in_page
    page.goto(base + "/console/activity")
    record = page.locator("table.activity tbody tr a").first.get_attribute("href")
    for name, path in [*PAGES, ("message", record)]:
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 900})
            response = page.goto(base + path)
            assert response.status == 200, path
            # On a phone wide tables scroll inside their box; at 1280 nothing does.
            assert overflow(page, tables_scroll=width < 1280) == [], (name, width)
            screenshot(page, f"page-{name}-{width}")
    assert errors == [], "\n".join(errors)


def test_activity_reads_at_a_glance_at_1280(signed_in_page):
    page, base, _ = signed_in_page
    page.goto(base + "/console/activity")
    table = page.locator("table.activity")
    box = page.locator(".table-scroll").bounding_box()
    assert table.bounding_box()["width"] <= box["width"] + 1
    bounced = table.locator("tbody tr").filter(has_text=LONG_ADDRESS)
    # One row of a bounce stays a few lines tall, with its status and class readable.
    assert bounced.bounding_box()["height"] < 100
    assert bounced.locator(".badge").first.inner_text() == "Bounce"
    assert bounced.locator(".bounce-class").inner_text() == "hard"
    # The reply is cut short, whole in its tooltip and on the message page.
    reply = bounced.locator("td.reason")
    assert reply.inner_text().endswith("...") and len(reply.inner_text()) < 100
    assert reply.locator("a").get_attribute("title") == LONG_REPLY
    sent = bounced.locator("td.sent")
    assert sent.evaluate("td => td.scrollWidth <= td.clientWidth")
    reply.locator("a").click()
    page.wait_for_load_state()
    assert LONG_REPLY in page.locator("ol.timeline").inner_text()


def test_the_login_page_fits(app, browser, live_server):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    for width in (1280, 390):
        page.set_viewport_size({"width": width, "height": 800})
        page.goto(live_server + "/console/login")
        assert overflow(page) == [], width
        screenshot(page, f"page-login-{width}")
    page.close()


def test_a_records_stream_shows_beside_its_status_when_it_has_one(app, account):
    """Records carry their stream; the page shows it beside the status."""
    import flask

    from layang.domain.records import ActivityRecord
    from layang.mail.message import Mailbox

    record = ActivityRecord(
        id="r1",
        transmission_id="t1",
        message_id="<m@x>",
        recipient="ana@rcpt.test",
        recipient_type="to",
        sender=Mailbox("shop@acme.test", None),
        subject="Hi",
        status="Delivery",
        created_at=0,
        updated_at=0,
        metadata={},
        events=(),
    )

    class WithStream:
        def __init__(self, record: ActivityRecord, stream: str) -> None:
            self._record, self.stream = record, stream

        def __getattr__(self, name: str) -> object:
            return getattr(self._record, name)

    def shown(items: list[object]) -> str:
        with app.test_request_context("/console/activity"):
            flask.g.console_account = account
            return flask.render_template(
                "console/activity.html",
                items=items,
                filters={},
                statuses=(),
                size=50,
                sizes=(50,),
                first=1,
                older_url=None,
                newer_url=None,
            )

    # Every record has a stream (transactional unless sent as broadcast).
    assert "stream-transactional" in shown([record])
    assert '<span class="badge stream stream-broadcast" title="Stream">broadcast</span>' in shown(
        [WithStream(record, "broadcast")]
    )
