"""Every console page at 390, 768, 1280 and 1920 px wide, with long addresses, subjects and
replies, several domains and their records, waiting mail and TLS sessions: nothing scrolls
sideways, nothing visible runs past the right edge (a wide table scrolls inside its own box), the
navigation keeps to one line, badges and addresses stay whole; a screenshot of each in
test-artifacts/. And the Activity table read at a glance."""

from __future__ import annotations

import pytest

from layang.clock import now_ms
from layang.destinations import sites, tlsrpt
from layang.destinations.mx import remember_sites
from layang.destinations.policy import TransportPolicy
from layang.domain import accounts
from tests.conftest import drain
from tests.support.browser import overflow, screenshot
from tests.web.test_console import SHIPPED, sign_in
from tests.web.test_console_security import STS

LONG_REPLY = (
    "550 5.1.1 <a.very.long.mailbox.name.for.testing@rcpt.test>: Recipient address rejected: "
    "User unknown in virtual mailbox table; see https://support.rcpt.test/mail/errors/5.1.1 "
    "for the reasons this can happen and what the sender may do about it"
)
LONG_ADDRESS = "a.very.long.mailbox.name.for.testing@rcpt.test"
LONG_SUBJECT = "Your order A-1234567 has shipped and is on its way: track it, change it, or ask us"
LONG_DOMAINS = (
    "shop.acme.test",
    "transactional-notifications.eu-west.acme-corporation.test",
    "m.acme.test",
)
WAITING_DOMAIN = "customers-of-a-very-large-mailbox-provider.example"
SLOW_DOWN_REPLY = (
    "421 4.7.28 [203.0.113.7] Our system has detected an unusual rate of unsolicited mail "
    "originating from your IP address; to protect our users, mail from your IP has been "
    "temporarily rate limited"
)

PAGES = [
    ("overview", "/console/overview"),
    ("activity", "/console/activity"),
    ("recipients", "/console/recipients"),
    ("templates", "/console/templates"),
    ("template", "/console/templates/shipped"),
    ("template-edit", "/console/templates/shipped/edit"),
    ("template-delete", "/console/templates/shipped/delete"),
    ("new-template", "/console/new-template"),
    ("domains", "/console/domains"),
    ("suppressions", "/console/suppressions"),
    ("webhooks", "/console/webhooks"),
    ("queue", "/console/queue"),
    ("security", "/console/security"),
    ("team", "/console/team"),
    ("keys", "/console/keys"),
    ("audit", "/console/audit"),
]
WIDTHS = (390, 768, 1280, 1920)


@pytest.fixture
def signed_in_page(client, upstream, relay_to, browser, live_server):
    acme = accounts.create_account("acme-corporation-europe", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    upstream.script_rcpt(LONG_ADDRESS, LONG_REPLY)
    for to in ([LONG_ADDRESS], ["ana@rcpt.test", "success@simulator.layang.test"]):
        response = client.post(
            "/v1/layang/transmissions",
            headers=auth,
            json={
                "from": {"email": "order-notifications@" + LONG_DOMAINS[1], "name": "Acme Shop"},
                "subject": LONG_SUBJECT,
                "to": [{"email": address} for address in to],
                "bodyText": "hi",
                "bodyHtml": "<p>hi</p>",
            },
        )
        assert response.status_code == 200, response.get_json()
    drain(relay_to(upstream))
    assert client.post("/v1/layang/templates", json=SHIPPED, headers=auth).status_code == 201
    for domain in LONG_DOMAINS:
        added = client.post("/v1/layang/domains", json={"domain": domain}, headers=auth)
        assert added.status_code in (200, 201), added.get_json()
    webhook = {
        "name": "Order events for the fulfilment service",
        "target": "https://hooks.fulfilment.acme-corporation.test/layang/events/v2/receive?"
        "source=layang&environment=production",
        "events": ["delivery", "bounce"],
    }
    client.post("/v1/layang/webhooks", json=webhook, headers=auth)
    # Mail that waits on a throttled site, with the site's long reply.
    waiting = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@" + LONG_DOMAINS[0]},
            "subject": "Hello",
            "to": [{"email": f"customer.number.{i}@{WAITING_DOMAIN}"} for i in range(3)],
            "bodyText": "hi",
        },
    )
    assert waiting.status_code == 200
    remember_sites([(WAITING_DOMAIN, "mailbox-provider.example", now_ms() + 3_600_000)])
    sites.slow_down("mailbox-provider.example", SLOW_DOWN_REPLY, 5)
    tlsrpt.record_session("rcpt.test", STS, "mx1.rcpt.test", True)
    tlsrpt.record_session(
        "rcpt.test",
        STS,
        "mx2.mail-servers.rcpt.test",
        False,
        "certificate-host-mismatch",
        "the certificate of mx2.mail-servers.rcpt.test is not valid for that name",
    )
    tlsrpt.record_session("plain.test", TransportPolicy("plain.test"), "mx.plain.test", True)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    sign_in(page, live_server, key)
    yield page, live_server, errors
    context.close()


# What a person would find past the right edge or broken, as drawn: the page scrolling
# sideways; an element whose right edge is past the window's, unless a box that scrolls (or
# clips) on purpose holds it; that box itself past the edge; a badge or an address broken
# across lines; a chart's y-axis labels out of sight or too small to read.
_MEASURE_JS = r"""(width) => {
  const found = [];
  const root = document.documentElement;
  if (root.scrollWidth > width) found.push(`the page is ${root.scrollWidth}px wide`);
  const name = (el) => {
    const classes = typeof el.className === 'string' ? el.className.trim() : '';
    const text = (el.textContent || '').trim().slice(0, 30);
    return el.tagName.toLowerCase() + (classes ? '.' + classes.split(/\s+/).join('.') : '') +
      (text ? ` "${text}"` : '');
  };
  const held = (el) => {
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement)
      if (getComputedStyle(p).overflowX !== 'visible') return true;
    return false;
  };
  for (const el of document.body.querySelectorAll('*')) {
    const style = getComputedStyle(el);
    if (style.visibility === 'hidden' || style.display === 'none') continue;
    const box = el.getBoundingClientRect();
    if (!box.width || !box.height || held(el)) continue;
    if (box.right > width + 0.5) found.push(`${name(el)} ends at ${Math.round(box.right)}px`);
  }
  for (const el of document.querySelectorAll('.badge')) {
    const lines = new Set([...el.getClientRects()].map((r) => Math.round(r.top)));
    if (lines.size > 1) found.push(`${name(el)} breaks across ${lines.size} lines`);
  }
  // An address or a host name may wrap before a dot or an at sign, or after a hyphen.
  for (const el of document.querySelectorAll('.address')) {
    if (!el.getClientRects().length || held(el) && el.closest('td') &&
        getComputedStyle(el.closest('td')).overflowX === 'hidden') continue;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    let before = null, top = null;
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i++) {
        const range = document.createRange();
        range.setStart(node, i);
        range.setEnd(node, i + 1);
        const rect = range.getBoundingClientRect();
        if (!rect.height) continue;
        const c = node.data[i];
        if (top !== null && rect.top > top + 2 && !'.@'.includes(c) && !'-/ '.includes(before))
          found.push(`${name(el)} breaks mid-word: ...${before}|${c}...`);
        before = c;
        top = rect.top;
      }
    }
  }
  for (const svg of document.querySelectorAll('svg.chart')) {
    if (getComputedStyle(svg).display === 'none') continue;
    const scroller = svg.closest('.chart-box').getBoundingClientRect();
    for (const label of svg.querySelectorAll('text.axis[text-anchor=end]')) {
      const r = label.getBoundingClientRect();
      if (r.left < scroller.left - 0.5 || r.right > scroller.right + 0.5)
        found.push(`y-axis label ${label.textContent} is out of sight`);
      if (r.height < 9) found.push(`y-axis label ${label.textContent} is ${r.height}px tall`);
    }
  }
  return found;
}"""


def nav_rows(page) -> int:
    tops = page.eval_on_selector_all(
        "header nav a", "links => links.map((a) => Math.round(a.getBoundingClientRect().top))"
    )
    return len(set(tops))


def test_every_page_fits_every_width(signed_in_page):
    page, base, errors = signed_in_page
    page.goto(base + "/console/activity")
    record = page.locator("table.activity tbody tr a").first.get_attribute("href")
    problems = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 900})
        for name, path in [*PAGES, ("message", record)]:
            response = page.goto(base + path)
            assert response.status == 200, path
            found = page.evaluate(_MEASURE_JS, width)
            # The navigation keeps to one line; from 1280 on, every item in sight.
            if nav_rows(page) != 1:
                found.append(f"the navigation takes {nav_rows(page)} lines")
            if width >= 1280 and page.evaluate(
                "(n => n.scrollWidth > n.clientWidth)(document.querySelector('header nav'))"
            ):
                found.append("the navigation scrolls")
            problems += [f"{name} at {width}px: {problem}" for problem in found]
            if width in (390, 1280):
                screenshot(page, f"page-{name}-{width}")
    assert not problems, "\n".join(problems)
    assert errors == [], "\n".join(errors)


def test_the_activity_status_is_in_sight_on_a_phone(signed_in_page):
    page, base, _ = signed_in_page
    page.set_viewport_size({"width": 390, "height": 900})
    page.goto(base + "/console/activity")
    bounced = page.locator("table.activity tbody tr").filter(has_text=LONG_ADDRESS)
    status = bounced.locator("td.status .badge").first
    box = status.bounding_box()
    assert status.inner_text() == "Bounce"
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390, box


def in_sight(element, words: str) -> bool:
    """Whether ``words`` in ``element`` are drawn inside its box (not cut off by a clamp)."""
    return element.evaluate(
        """(el, words) => {
          const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
          for (let node = walker.nextNode(); node; node = walker.nextNode()) {
            const at = node.data.indexOf(words);
            if (at < 0) continue;
            const range = document.createRange();
            range.setStart(node, at);
            range.setEnd(node, at + words.length);
            const box = el.getBoundingClientRect();
            return [...range.getClientRects()].every((r) => r.bottom <= box.bottom + 0.5);
          }
          return false;
        }""",
        words,
    )


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
    # The reply is cut short, whole in its tooltip and on the message page; what shows first
    # is why it bounced, not the address the row already names.
    reply = bounced.locator("td.reason")
    assert reply.inner_text().startswith("550 5.1.1 Recipient address rejected: User unknown")
    assert reply.inner_text().endswith("...") and len(reply.inner_text()) <= 120
    assert in_sight(reply.locator("code"), "User unknown")
    assert reply.locator("a").get_attribute("title") == LONG_REPLY
    sent = bounced.locator("td.sent")
    assert sent.evaluate("td => td.scrollWidth <= td.clientWidth")
    reply.locator("a").click()
    page.wait_for_load_state()
    assert LONG_REPLY in page.locator("ol.timeline").inner_text()


def test_the_login_page_fits(app, browser, live_server):
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": 800})
        page.goto(live_server + "/console/login")
        assert overflow(page) == [], width
        assert page.evaluate(_MEASURE_JS, width) == [], width
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
