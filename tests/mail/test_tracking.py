"""Open and click tracking, end to end on the bytes the upstream server received."""

from __future__ import annotations

import html
import re
import time
from urllib.parse import urlsplit

from itsdangerous import URLSafeSerializer
from peewee import fn

from layang.domain.engagement import REPEAT_WINDOW_MS
from layang.models import SANDBOX, Account, Event, Recipient
from tests.conftest import drain

HTML = """<!DOCTYPE html><html><body>
<p>Hello! <a href="https://shop.test/orders/42?a=1&amp;b=2">See your order</a></p>
<p><a href='http://shop.test/help'>Help</a> or <a href="mailto:help@shop.test">mail us</a>
or <a href="#top">top</a>.</p>
</body></html>"""
TEXT = "See your order: https://shop.test/orders/42\n"


class _IsoTimestamp:
    def __eq__(self, other):
        return isinstance(other, str) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]{12}Z", other)


ANY_ISO = _IsoTimestamp()


def send(client, auth, to, **options):
    body = {
        "from": {"email": "shop@sender.test"},
        "subject": "Tracked",
        "to": [{"email": a} for a in to],
        "bodyHtml": HTML,
        "bodyText": TEXT,
    }
    if options:
        body["optionsAttributes"] = options
    response = client.post("/v1/layang/transmissions", json=body, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["transmissionId"]


def html_of(received):
    return received.message.get_body(("html",)).get_content()


def links(html):
    return re.findall(r"""href=["']([^"']+)["']""", html)


def path_of(url):
    parts = urlsplit(url)
    assert parts.scheme == "http" and parts.netloc == "127.0.0.1:8000"
    return parts.path


def pixel_url(html):
    return re.search(r"""(?:src="|url\()([^")]+/t/o/[^")]+)""", html).group(1)


def record(client, auth, tid, address):
    page = client.get(
        "/v1/layang/activity", query_string={"transmissionId": tid}, headers=auth
    ).get_json()
    return next(r for r in page["items"] if r["recipient"] == address)


def test_open_and_click_tracking(client, auth, upstream, relay_to):
    tid = send(
        client, auth, ["ana@rcpt.test", "bob@rcpt.test"], openTracking=True, clickTracking=True
    )
    drain(relay_to(upstream))
    # One copy per recipient: their tracking URLs differ.
    assert sorted(r.rcpt_tos[0] for r in upstream.received) == ["ana@rcpt.test", "bob@rcpt.test"]
    ana = next(r for r in upstream.received if r.rcpt_tos == ["ana@rcpt.test"])
    bob = next(r for r in upstream.received if r.rcpt_tos == ["bob@rcpt.test"])
    ana_html, bob_html = html_of(ana), html_of(bob)
    assert ana_html != bob_html
    assert ana.message["To"] == "ana@rcpt.test, bob@rcpt.test"  # same headers for both

    hrefs = links(ana_html)
    tracked = [h for h in hrefs if "/t/c/" in h]
    assert len(tracked) == 2
    assert "mailto:help@shop.test" in hrefs and "#top" in hrefs
    assert "shop.test/orders" not in ana_html  # the original URL is only inside the token
    assert ana.message.get_body(("plain",)).get_content() == TEXT.replace("\n", "\r\n")

    # No image in the mail: the pixel is a 1x1 box's background, not an image of its own.
    assert "<img" not in ana_html
    pixel = re.search(
        r'<div style="background-image:url\(([^)]+/t/o/[^)]+)\);[^"]*width:1px;height:1px', ana_html
    ).group(1)
    for agent in ("Mail/1.0", "Mail/2.0"):
        opened = client.get(path_of(pixel), headers={"User-Agent": agent})
        assert opened.status_code == 200
        assert opened.mimetype == "image/gif" and opened.data.startswith(b"GIF89a")
        assert "no-store" in opened.headers["Cache-Control"]

    clicked = client.get(path_of(tracked[0]), headers={"User-Agent": "Browser/9"})
    assert clicked.status_code == 302
    assert clicked.headers["Location"] == "https://shop.test/orders/42?a=1&b=2"
    second = client.get(path_of(tracked[1]))
    assert second.headers["Location"] == "http://shop.test/help"

    events = record(client, auth, tid, "ana@rcpt.test")["events"]
    # The second open is counted on the first, not stored as an event of its own.
    assert [e["status"] for e in events] == ["Injection", "Delivery", "Open", "Click", "Click"]
    opened = events[2]["detail"]
    assert opened == {"userAgent": "Mail/1.0", "first": True, "count": 2, "lastAt": ANY_ISO}
    click = events[3]["detail"]
    assert click == {"url": "https://shop.test/orders/42?a=1&b=2", "userAgent": "Browser/9"}
    assert record(client, auth, tid, "ana@rcpt.test")["status"] == "Delivery"
    assert [e["status"] for e in record(client, auth, tid, "bob@rcpt.test")["events"]] == [
        "Injection",
        "Delivery",
    ]

    filtered = client.get(
        "/v1/layang/activity", query_string={"status": "Click"}, headers=auth
    ).get_json()["items"]
    assert [r["recipient"] for r in filtered] == ["ana@rcpt.test"]


def test_tampered_and_foreign_tokens_are_404(client, auth, upstream, relay_to, app):
    send(client, auth, ["ana@rcpt.test"], openTracking=True, clickTracking=True)
    drain(relay_to(upstream))
    html = html_of(upstream.received[0])
    click = path_of(next(h for h in links(html) if "/t/c/" in h))
    token = click.rsplit("/", 1)[1]
    tampered = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
    response = client.get("/t/c/" + tampered)
    assert response.status_code == 404 and "Location" not in response.headers
    # A person followed the link: a page says so, never a redirect elsewhere.
    assert response.mimetype == "text/html"
    assert "This link is not valid." in response.get_data(as_text=True)

    foreign = URLSafeSerializer("another-secret", salt="layang-tracking").dumps(
        ["c", "whatever", "https://evil.test/"]
    )
    assert client.get("/t/c/" + foreign).status_code == 404
    # A genuine signature over a non-web URL is refused too.
    ours = URLSafeSerializer(app.config["SECRET_KEY"], salt="layang-tracking")
    assert client.get("/t/c/" + ours.dumps(["c", "x", "javascript:alert(1)"])).status_code == 404
    assert client.get("/t/o/" + ours.dumps(["o", "no-such-record"])).status_code == 404
    assert client.get("/t/o/" + ours.dumps(["c", "x", "https://a.test/"])).status_code == 404


def test_untracked_mail_has_no_tracking_urls(client, auth, upstream, relay_to):
    send(client, auth, ["ana@rcpt.test", "bob@rcpt.test"])
    send(client, auth, ["cy@rcpt.test"], openTracking=False, clickTracking=False)
    drain(relay_to(upstream))
    # One transaction per recipient (each has its own return path), the same message built once.
    assert len(upstream.received) == 3
    for received in upstream.received:
        assert b"/t/o/" not in received.data and b"/t/c/" not in received.data


def test_open_only_leaves_links_alone(client, auth, upstream, relay_to):
    send(client, auth, ["ana@rcpt.test"], openTracking=True)
    drain(relay_to(upstream))
    html = html_of(upstream.received[0])
    assert "/t/o/" in html and "/t/c/" not in html
    assert 'href="https://shop.test/orders/42?a=1&amp;b=2"' in html


def test_a_replayed_pixel_or_link_is_counted_not_stored_again(client, auth, upstream, relay_to):
    tid = send(client, auth, ["ana@rcpt.test"], openTracking=True, clickTracking=True)
    drain(relay_to(upstream))
    html = html_of(upstream.received[0])
    pixel = path_of(pixel_url(html))
    first_link, second_link = (path_of(h) for h in links(html) if "/t/c/" in h)
    for _ in range(300):
        assert client.get(pixel).status_code == 200
        assert client.get(first_link).status_code == 302
    client.get(second_link)

    events = record(client, auth, tid, "ana@rcpt.test")["events"]
    assert [e["status"] for e in events] == ["Injection", "Delivery", "Open", "Click", "Click"]
    assert events[2]["detail"]["count"] == 300 and events[2]["detail"]["first"] is True
    assert events[3]["detail"]["count"] == 300
    assert events[3]["detail"]["url"] == "https://shop.test/orders/42?a=1&b=2"
    assert "count" not in events[4]["detail"]  # the other link: one click, its own event
    assert Event.select().count() == 4

    # Once the window has passed, the next open is an event again (not the first one).
    Event.update(created_at=Event.created_at - REPEAT_WINDOW_MS).execute()
    client.get(pixel)
    client.get(first_link)
    events = record(client, auth, tid, "ana@rcpt.test")["events"]
    assert [e["status"] for e in events][5:] == ["Open", "Click"]
    assert events[5]["detail"]["first"] is False and "count" not in events[5]["detail"]


def test_a_record_lists_a_bounded_number_of_events(client, auth, upstream, relay_to):
    tid = send(client, auth, ["ana@rcpt.test"], openTracking=True)
    drain(relay_to(upstream))
    pixel = path_of(pixel_url(html_of(upstream.received[0])))
    client.get(pixel, headers={"User-Agent": "First/1"})
    recipient_id = record(client, auth, tid, "ana@rcpt.test")["id"]
    # Events stored over a long life (a year of hourly opens, say) before the count existed.
    base = Event.select(fn.MAX(Event.created_at)).scalar()
    Event.insert_many(
        [
            {"recipient": recipient_id, "status": "Open", "created_at": base + i, "detail": "{}"}
            for i in range(1, 500)
        ]
    ).execute()

    ana = record(client, auth, tid, "ana@rcpt.test")
    statuses = [e["status"] for e in ana["events"]]
    # The Injection, the first of each status (Delivery, the first Open), the newest 100.
    assert len(statuses) == 1 + 2 + 100
    assert statuses[:3] == ["Injection", "Delivery", "Open"]
    assert ana["events"][2]["detail"]["userAgent"] == "First/1"
    assert ana["eventsOmitted"] == 501 - 102  # Delivery, the first Open, 499 more
    times = [e["timestamp"] for e in ana["events"][3:]]
    assert times == sorted(times)

    view = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).get_json()
    assert view["recipients"][0]["events"] == ana["events"]
    assert view["recipients"][0]["eventsOmitted"] == 399
    one = client.get(f"/v1/layang/activity?transmissionId={tid}&limit=1", headers=auth)
    assert len(one.get_data()) < 20_000


def test_tracking_links_expire(client, auth, upstream, relay_to, app):
    tid = send(client, auth, ["ana@rcpt.test"], openTracking=True, clickTracking=True)
    drain(relay_to(upstream))
    recipient_id = record(client, auth, tid, "ana@rcpt.test")["id"]
    signer = URLSafeSerializer(app.config["SECRET_KEY"], salt="layang-tracking")
    now = int(time.time())
    days_91 = now - 91 * 24 * 3600
    days_89 = now - 89 * 24 * 3600
    url = "https://shop.test/orders/42"

    expired = client.get("/t/c/" + signer.dumps(["c", recipient_id, url, days_91]))
    assert expired.status_code == 200 and expired.mimetype == "text/html"
    page = expired.get_data(as_text=True)
    assert "This link has expired" in page
    assert f'href="{url}"' in page and "Location" not in expired.headers
    pixel = client.get("/t/o/" + signer.dumps(["o", recipient_id, days_91]))
    assert pixel.status_code == 200 and pixel.mimetype == "image/gif"
    assert Event.select().where(Event.status.in_(["Open", "Click"])).count() == 0

    still = client.get("/t/c/" + signer.dumps(["c", recipient_id, url, days_89]))
    assert still.status_code == 302 and still.headers["Location"] == url
    # The issue time is signed: a token cannot be made younger.
    token = signer.dumps(["c", recipient_id, url, days_91])
    signature = token.rsplit(".", 1)[1]
    younger = signer.dumps(["c", recipient_id, url, now]).rsplit(".", 1)[0]
    assert client.get(f"/t/c/{younger}.{signature}").status_code == 404
    assert [e["status"] for e in record(client, auth, tid, "ana@rcpt.test")["events"]] == [
        "Injection",
        "Delivery",
        "Click",
    ]


def test_tokens_without_an_issue_time_are_dated_by_their_record(
    client, auth, upstream, relay_to, app
):
    tid = send(client, auth, ["ana@rcpt.test"], clickTracking=True)
    drain(relay_to(upstream))
    recipient_id = record(client, auth, tid, "ana@rcpt.test")["id"]
    signer = URLSafeSerializer(app.config["SECRET_KEY"], salt="layang-tracking")
    old_click = "/t/c/" + signer.dumps(["c", recipient_id, "https://shop.test/"])
    old_open = "/t/o/" + signer.dumps(["o", recipient_id])
    assert client.get(old_click).headers["Location"] == "https://shop.test/"
    assert client.get(old_open).status_code == 200
    assert Event.select().count() == 3  # Delivery, Click, Open

    Recipient.update(created_at=Recipient.created_at - 91 * 24 * 3600 * 1000).execute()
    response = client.get(old_click)
    assert response.status_code == 200 and "This link has expired" in response.get_data(True)
    assert client.get(old_open).status_code == 200
    assert Event.select().count() == 3


def test_a_sandbox_accounts_links_never_redirect(client, auth, upstream, relay_to, account):
    tid = send(client, auth, ["ana@rcpt.test"], clickTracking=True)
    drain(relay_to(upstream))
    click = path_of(next(h for h in links(html_of(upstream.received[0])) if "/t/c/" in h))
    Account.update(mode=SANDBOX).where(Account.id == account.id).execute()

    response = client.get(click)
    assert response.status_code == 200 and "Location" not in response.headers
    page = response.get_data(as_text=True)
    assert 'href="https://shop.test/orders/42?a=1&amp;b=2"' in page
    assert response.headers["Referrer-Policy"] == "no-referrer"
    assert [e["status"] for e in record(client, auth, tid, "ana@rcpt.test")["events"]][-1] == (
        "Click"
    )


# Each link with its href value as written (quotes and all) where "@" stands.
TRICKY_LINKS = [
    (
        '<a id="l0" href=@>search</a>',
        '"https://shop.example.com/search?q=shoes&timestamp=123&section=news&param=1"',
    ),
    (
        '<a id="l1" href=@>legacy names</a>',
        '"https://shop.example.com/?a=1&copy=2&reg=3&not=4'
        '&curren=5&para=6&sect=7&times=8&AMP=9&ampx=1&lt2=3"',
    ),
    ('<a id="l2" href=@>references</a>', '"https://shop.example.com/?a=1&amp;b=2&lt;c&gt"'),
    ('<a id="l3" href=@>more</a>', '"https://shop.example.com/?x=&times;y&notin;z&notit;w&not"'),
    ("<a id=l4 href=@>unquoted</a>", "https://shop.example.com/u?a=1&sect=2&copy"),
    ('<a id="l5" href=@>single quotes</a>', "'https://shop.example.com/q?s=\"x\"&para=1'"),
    ('<a id="l6" href=@>spaces</a>', '"  https://Shop.Example.COM/a b/\n?c=d e\t#f g  "'),
    ('<a id="l7" href=@>numeric</a>', '"https://shop.example.com/?a=1&#38;b=2&#x3d;&#X3C;"'),
    ('<A ID="l8" HREF=@>upper case</A>', '"https://shop.example.com/CASE?x=1&REG=2"'),
    ('<a id="l9" href=@>international</a>', '"https://bücher.example/straße?ü=1"'),
    ('<a id="l10" href=@>backslashes</a>', '"https://shop.example.com\\a\\..\\b"'),
    (
        '<a id="l11" href=@ href="https://evil.example/">first</a>',
        '"https://shop.example.com/first"',
    ),
    ('<a id="l12" title="a > b" href = @>spaced</a>', '"https://shop.example.com/t?a&b"'),
    (
        '<map name="m"><area id="l13" href=@ alt="m"></map>',
        '"https://shop.example.com/map?x=1&yen=2"',
    ),
]
# Written exactly so in the mail that goes out, whatever tracking does.
UNTRACKED_LINKS = [
    '<a href="mailto:help@shop.example.com?subject=a&copy=b">mail</a>',
    '<a href="tel:+15551234567">call</a>',
    '<a href="#top">top</a>',
    '<a href="{{ unsubscribe_url }}">placeholder</a>',
    '<a href="https://shop.example.com/o/{{order_id}}?a=1&copy=2">half placeholder</a>',
    '<a href="https://shop.example.com/*|EMAIL|*">merge tag</a>',
    '<a data-layang-track="off" href="https://shop.example.com/raw?a=1&copy=2">raw</a>',
    '<a href="https://shop.example.com/x" DATA-LAYANG-TRACK=OFF>raw upper</a>',
    "<!-- <a href='https://shop.example.com/commented'>no</a> -->",
    "<script>var s = '<a href=\"https://shop.example.com/script\">';</script>",
]
TRACKED_HREF = re.compile(r'"http://127\.0\.0\.1:8000/t/c/[^"]+"')


def links_document(values):
    return (
        "<!DOCTYPE html><html><head><style>a[href] { color: red }</style></head><body>\n"
        + "\n".join(
            f"<p>{tag.replace('@', value)}</p>"
            for (tag, _), value in zip(TRICKY_LINKS, values, strict=True)
        )
        + "\n"
        + "\n".join(f"<p>{link}</p>" for link in UNTRACKED_LINKS)
        + "\n</body></html>"
    )


def test_tracked_links_go_where_a_browser_goes(client, auth, upstream, relay_to, browser):
    document = links_document([value for _, value in TRICKY_LINKS])
    page = browser.new_page()
    page.set_content(document)
    expected = page.evaluate(
        "n => Array.from({length: n}, (_, i) => document.getElementById('l' + i).href)",
        len(TRICKY_LINKS),
    )
    page.close()
    assert expected[0] == (
        "https://shop.example.com/search?q=shoes&timestamp=123&section=news&param=1"
    )

    response = client.post(
        "/v1/layang/transmissions",
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "Links",
            "to": [{"email": "ana@rcpt.test"}],
            "bodyHtml": document,
            "bodyText": "Links",
            "optionsAttributes": {"clickTracking": True},
        },
        headers=auth,
    )
    assert response.status_code == 200, response.get_json()
    drain(relay_to(upstream))
    sent = html_of(upstream.received[0]).replace("\r\n", "\n")  # MIME's line ends

    tracked = [value.strip('"') for value in TRACKED_HREF.findall(sent)]
    assert len(tracked) == len(TRICKY_LINKS)
    followed = [client.get(path_of(html.unescape(url))).headers["Location"] for url in tracked]
    assert followed == expected
    # Outside the rewritten values, the document is byte for byte as the sender wrote it.
    # (MIME ends the part with a line end.)
    assert TRACKED_HREF.sub("T", sent) == links_document(["T"] * len(TRICKY_LINKS)) + "\n"
