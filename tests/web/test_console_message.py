"""The console's message view, search, paging and template editing over plain HTTP: what each
page holds, whose data it may show, and which forms it refuses."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta

import pytest

import templates_store
from layang.clock import now_ms
from layang.db import write_transaction
from layang.domain import accounts, records
from layang.domain.message_view import parse_message
from layang.mail.events import append_events
from layang.models import Transmission
from tests.conftest import BACKENDS, b64, drain
from tests.web.test_console import _login

MARKUP = "<img src=x onerror=alert(1)>"


def _send(client, auth, **changes):
    body = {
        "from": {"email": "shop@acme.test", "name": "Shop"},
        "subject": "Hello",
        "to": [{"email": "ana@rcpt.test"}],
        "bodyText": "hi there",
        **changes,
    }
    response = client.post("/v1/layang/transmissions", headers=auth, json=body)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["transmissionId"]


def _record_id(client, auth, transmission_id):
    view = client.get(f"/v1/layang/transmissions/{transmission_id}", headers=auth).get_json()
    return view["recipients"][0]["id"]


def _token(page: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


def test_the_message_is_shown_with_its_parts_and_markup_stays_text(
    client, auth, api_key, upstream, relay_to
):
    tid = _send(
        client,
        auth,
        subject=f"Order {MARKUP}",
        bodyHtml="<p>Hello <b>Ana</b></p><img src='https://tracker.test/p.gif'>",
        bodyText=f"Plain {MARKUP}",
        headers=[{"name": "X-Note", "value": MARKUP}],
        metadata={"ref": MARKUP},
        attachments=[
            {"filename": f"{MARKUP}.txt", "mimeType": "text/plain", "value": b64(b"12345")},
            {"filename": "invoice.pdf", "mimeType": "application/pdf", "value": b64(b"%PDF" * 300)},
        ],
    )
    record_id = _record_id(client, auth, tid)
    _login(client, api_key)

    # Before delivery the message is rebuilt from what was stored; after, the same.
    for moment in ("queued", "delivered"):
        if moment == "delivered":
            drain(relay_to(upstream))
        response = client.get(f"/console/activity/{record_id}")
        assert response.status_code == 200
        page = response.get_data(as_text=True)
        assert MARKUP not in page
        escaped = "&lt;img src=x onerror=alert(1)&gt;"
        assert f"<h1>Order {escaped}</h1>" in page
        assert f'<th scope="row">X-Note</th><td>{escaped}</td>' in page
        assert f'<th scope="row">Subject</th><td>Order {escaped}</td>' in page
        assert '<th scope="row">From</th><td>Shop &lt;shop@acme.test&gt;</td>' in page
        assert f"<dt>ref</dt><dd>{escaped}</dd>" in page
        assert f"Plain {escaped}" in page
        assert f"<tr><td>{escaped}.txt</td>" in page
        assert "<code>text/plain</code></td><td>5 Bytes</td>" in page
        assert "<td>invoice.pdf</td>" in page and "1.2 kB" in page
        assert 'sandbox referrerpolicy="no-referrer"' in page

    frame = client.get(f"/console/activity/{record_id}/message.html")
    assert frame.status_code == 200
    assert frame.get_data(as_text=True).rstrip() == (
        "<p>Hello <b>Ana</b></p><img src='https://tracker.test/p.gif'>"
    )
    policy = frame.headers["Content-Security-Policy"]
    assert "sandbox" in policy and "img-src data:;" in policy and "script" not in policy
    assert "frame-ancestors 'self'" in policy
    assert frame.headers["Content-Disposition"] == "inline"
    allowed = client.get(f"/console/activity/{record_id}/message.html?images=1")
    assert "img-src data: http: https:;" in allowed.headers["Content-Security-Policy"]

    listing = client.get("/console/activity").get_data(as_text=True)
    assert MARKUP not in listing
    assert "Order &lt;img src=x onerror=alert(1)&gt;" in listing


def test_a_message_without_html_has_no_frame(client, auth, api_key):
    record_id = _record_id(client, auth, _send(client, auth))
    _login(client, api_key)
    page = client.get(f"/console/activity/{record_id}").get_data(as_text=True)
    assert "<iframe" not in page and "hi there" in page
    assert client.get(f"/console/activity/{record_id}/message.html").status_code == 404

    # A stored message this release cannot read is said so; the rest of the page stays.
    Transmission.update(payload='{"v": 99}').execute()
    page = client.get(f"/console/activity/{record_id}").get_data(as_text=True)
    assert "The message cannot be built: unknown message payload version 99" in page
    assert "<h2>Timeline</h2>" in page


def test_stored_raw_messages_are_read_as_stored():
    raw = (
        b"Received: from a by b\r\nReceived: from c by d\r\n"
        b"From: =?utf-8?q?Ana_=C3=A9?= <ana@x.test>\r\nSubject: hi\r\n"
        b'Content-Type: multipart/mixed; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: text/plain; charset=latin-1\r\n\r\ncaf\xe9\r\n"
        b"--b\r\nContent-Type: image/png\r\nContent-ID: <logo>\r\n"
        b"Content-Transfer-Encoding: base64\r\n\r\niVBORw==\r\n--b--\r\n"
    )
    view = parse_message("r1", raw)
    assert [name for name, _ in view.headers][:3] == ["Received", "Received", "From"]
    assert dict(view.headers)["From"] == "Ana é <ana@x.test>"
    assert view.text == "café" and view.html is None and not view.rebuilt
    (logo,) = view.attachments
    assert (logo.filename, logo.media_type, logo.size, logo.content_id) == (
        "",
        "image/png",
        4,
        "logo",
    )


def test_another_accounts_message_and_templates_are_not_found(client, auth, api_key):
    record_id = _record_id(client, auth, _send(client, auth, bodyHtml="<p>secret</p>"))
    client.post("/v1/layang/templates", headers=auth, json={"id": "mine", "name": "Mine"})
    other = accounts.create_account("other", live=True)
    _login(client, accounts.create_api_key(other)[1])
    token = _token(client.get("/console/activity").get_data(as_text=True))

    for path in (
        f"/console/activity/{record_id}",
        f"/console/activity/{record_id}/message.html",
        "/console/templates/mine/edit",
        "/console/templates/mine/delete",
    ):
        response = client.get(path)
        assert response.status_code == 404, path
        assert "secret" not in response.get_data(as_text=True)
    edited = client.post(
        "/console/templates/mine/edit", data={"csrf_token": token, "name": "Taken", "version": "1"}
    )
    assert edited.status_code == 404
    assert client.post(
        "/console/templates/mine/delete", data={"csrf_token": token}
    ).status_code == (404)
    template = client.get("/v1/layang/templates/mine", headers=auth).get_json()
    assert (template["name"], template["version"]) == ("Mine", 1)


def test_template_forms_need_the_csrf_token_and_a_full_key(client, auth, account, api_key):
    client.post("/v1/layang/templates", headers=auth, json={"id": "kept", "name": "Kept"})
    _login(client, api_key)
    for path, data in (
        ("/console/new-template", {"id": "forged", "name": "Forged"}),
        ("/console/templates/kept/edit", {"name": "Forged", "version": "1"}),
        ("/console/templates/kept/delete", {}),
    ):
        assert client.post(path, data=data).status_code == 400, path
        assert client.post(path, data={**data, "csrf_token": "wrong"}).status_code == 400, path
    assert client.get("/v1/layang/templates/forged", headers=auth).status_code == 404
    kept = client.get("/v1/layang/templates/kept", headers=auth).get_json()
    assert (kept["name"], kept["version"]) == ("Kept", 1)

    reader = app_client = client.application.test_client()
    _login(reader, accounts.create_api_key(account, scope="read")[1])
    token = _token(app_client.get("/console/new-template").get_data(as_text=True))
    refused = reader.post("/console/new-template", data={"csrf_token": token, "name": "R"})
    assert refused.status_code == 403


def test_template_errors_show_beside_their_fields(client, auth, api_key):
    client.post("/v1/layang/templates", headers=auth, json={"id": "taken", "name": "Taken"})
    _login(client, api_key)
    token = _token(client.get("/console/new-template").get_data(as_text=True))

    def create(**fields):
        data = {"csrf_token": token, "id": "", "name": "N", "subject": "", "bodyHtml": ""}
        response = client.post("/console/new-template", data={**data, **fields})
        return response.status_code, response.get_data(as_text=True)

    status, page = create(bodyHtml="<p>\n{% if %}</p>")
    assert status == 400
    assert re.search(r'id="bodyHtml-error" role="alert">bodyHtml line 2: [^<]+</p>', page)
    assert "&lt;p&gt;\n{% if %}&lt;/p&gt;</textarea>" in page  # the text typed is kept
    status, page = create(id="taken")
    assert (status, 'id="id-error"' in page) == (400, True)
    assert "A template with this id exists already." in page
    status, page = create(id="Bad Id")
    assert 'id="id-error"' in page and "id must match" in page
    status, page = create(name=" ")
    assert 'id="name-error"' in page and "name must be a non-empty string" in page
    assert client.get("/v1/layang/templates", headers=auth).get_json()["items"][0]["id"] == "taken"

    response = client.post(
        "/console/new-template",
        data={"csrf_token": token, "id": "fresh", "name": "Fresh", "subject": "Hi {{who}}"},
    )
    assert response.status_code == 302
    assert response.headers["Location"] == "/console/templates/fresh"
    fresh = client.get("/v1/layang/templates/fresh", headers=auth).get_json()
    assert (fresh["subject"], fresh["bodyHtml"], fresh["shortcodes"]) == (
        "Hi {{who}}",
        None,
        ["who"],
    )


def test_an_edit_made_meanwhile_is_not_overwritten_silently(client, auth, api_key):
    client.post(
        "/v1/layang/templates",
        headers=auth,
        json={"id": "shared", "name": "Shared", "subject": "One", "bodyText": "first"},
    )
    _login(client, api_key)
    form = client.get("/console/templates/shared/edit").get_data(as_text=True)
    assert 'name="version" value="1"' in form
    token = _token(form)
    # Someone else saves through the API while this editor has the form open.
    etag = client.get("/v1/layang/templates/shared", headers=auth).headers["ETag"]
    assert (
        client.put(
            "/v1/layang/templates/shared",
            headers={**auth, "If-Match": etag},
            json={"subject": "Theirs"},
        ).status_code
        == 200
    )
    mine = {"csrf_token": token, "name": "Shared", "subject": "Mine", "bodyText": "mine"}
    response = client.post("/console/templates/shared/edit", data={**mine, "version": "1"})
    assert response.status_code == 409
    page = response.get_data(as_text=True)
    assert "someone else saved version 2" in page
    assert '<pre class="source current-subject">Theirs</pre>' in page
    assert 'id="subject" name="subject" value="Mine"' in page
    assert 'name="version" value="2"' in page
    current = client.get("/v1/layang/templates/shared", headers=auth).get_json()
    assert (current["version"], current["subject"]) == (2, "Theirs")

    # Pressing Save again, having seen their version, saves over it.
    response = client.post("/console/templates/shared/edit", data={**mine, "version": "2"})
    assert response.status_code == 302
    current = client.get("/v1/layang/templates/shared", headers=auth).get_json()
    assert (current["version"], current["subject"], current["bodyText"]) == (3, "Mine", "mine")
    # An emptied part is removed, as null is in the API.
    client.post("/console/templates/shared/edit", data={**mine, "bodyText": "", "version": "3"})
    assert client.get("/v1/layang/templates/shared", headers=auth).get_json()["bodyText"] is None

    confirm = client.get("/console/templates/shared/delete").get_data(as_text=True)
    assert "Delete <code>shared</code>?" in confirm
    deleted = client.post("/console/templates/shared/delete", data={"csrf_token": token})
    assert deleted.status_code == 302
    assert client.get("/v1/layang/templates/shared", headers=auth).status_code == 404


def test_preview_data_is_prefilled_from_the_shortcodes(client, auth, api_key):
    client.post(
        "/v1/layang/templates",
        headers=auth,
        json={
            "id": "t",
            "name": "T",
            "subject": "{{ order }} for {{user.first}}",
            "bodyText": "{% for item in items %}{{ item.sku }}{% endfor %}",
        },
    )
    _login(client, api_key)
    page = client.get("/console/templates/t").get_data(as_text=True)
    data = re.search(r'<textarea id="data" name="data"[^>]*>([^<]*)</textarea>', page).group(1)
    assert data.replace("&#34;", '"') == (
        '{\n  "items": "",\n  "order": "",\n  "user": {\n    "first": ""\n  }\n}'
    )
    assert templates_store.sample_data(["a", "a.b", "c.d.e"]) == {
        "a": {"b": ""},
        "c": {"d": {"e": ""}},
    }


def test_live_accounts_are_told_they_need_no_authorized_recipients(client, account, api_key):
    _login(client, api_key)
    page = client.get("/console/recipients").get_data(as_text=True)
    assert "live</strong> account: it sends to any address" in page
    assert "In the sandbox you send from" not in page
    sandbox_client = client.application.test_client()
    _login(sandbox_client, accounts.create_api_key(accounts.create_account("sb"))[1])
    page = sandbox_client.get("/console/recipients").get_data(as_text=True)
    assert "In the sandbox you send from" in page and "live</strong>" not in page


@pytest.mark.parametrize("backend", BACKENDS)
def test_search_and_paging_in_the_database(client, auth, account, backend):
    metadata = [
        {"order": "A-1", "tier": 5, "vip": True},
        {"order": "A-2", 'we"ird': "50%_off", "vip": False},
        {"order": "B-3", "nested": {"k": 1}},
    ]
    for n, meta in enumerate(metadata):
        _send(
            client,
            auth,
            subject=f"Invoice {n} 100%",
            to=[{"email": f"user{n}@Rcpt.test"}, {"email": f"other{n}@elsewhere.test"}],
            metadata=meta,
        )

    def found(**search):
        window = records.browse_activity(account, search=records.ActivitySearch(**search))
        return sorted(r.recipient for r in window.items)

    assert found(recipient_contains="rcpt.TEST") == [
        "user0@rcpt.test",
        "user1@rcpt.test",
        "user2@rcpt.test",
    ]
    assert found(subject_contains="invoice 1") == ["other1@elsewhere.test", "user1@rcpt.test"]
    assert found(subject_contains="0%") == [
        f"{k}{n}@{d}" for k, d in [("other", "elsewhere.test")] for n in range(3)
    ] + [f"user{n}@rcpt.test" for n in range(3)]
    assert found(subject_contains="_") == []  # a LIKE wildcard is a plain character here
    assert found(metadata=("order", "A-2"), recipient_contains="user") == ["user1@rcpt.test"]
    assert found(metadata=("tier", "5"), recipient_contains="user") == ["user0@rcpt.test"]
    assert found(metadata=("vip", "true"), recipient_contains="user") == ["user0@rcpt.test"]
    assert found(metadata=("vip", "false"), recipient_contains="user") == ["user1@rcpt.test"]
    assert found(metadata=('we"ird', "50%_off"), recipient_contains="user") == ["user1@rcpt.test"]
    assert found(metadata=("order", "A-%")) == []
    assert found(metadata=("missing", "")) == []
    # The API's recipient filter stays exact.
    exact = client.get("/v1/layang/activity?recipient=rcpt.test", headers=auth).get_json()
    assert exact["items"] == []
    assert (
        len(
            client.get("/v1/layang/activity?recipient=USER1@rcpt.test", headers=auth).get_json()[
                "items"
            ]
        )
        == 1
    )

    # Six records, pages of four, read back and forth.
    first = records.browse_activity(account, limit=4)
    assert first.newer_cursor is None and first.older_cursor is not None
    second = records.browse_activity(account, limit=4, older_than=first.older_cursor)
    assert len(second.items) == 2 and second.older_cursor is None
    back = records.browse_activity(account, limit=4, newer_than=second.newer_cursor)
    assert [r.id for r in back.items] == [r.id for r in first.items]
    assert back.newer_cursor is None and back.older_cursor == first.older_cursor
    middle = records.browse_activity(account, limit=2, newer_than=second.items[0].id)
    assert [r.id for r in middle.items] == [r.id for r in first.items[2:]]
    assert middle.newer_cursor == first.items[2].id


LAST_AT = "2026-11-25T08:30:00.000Z"


def test_any_status_shows_in_the_timeline_with_its_detail(client, auth, api_key):
    record_id = _record_id(client, auth, _send(client, auth))
    with write_transaction():
        append_events(
            [
                (
                    record_id,
                    "Complaint",
                    now_ms(),
                    json.dumps({"feedbackType": "abuse", "note": MARKUP, "lastAt": LAST_AT}),
                )
            ]
        )
    client.post("/v1/layang/templates", headers=auth, json={"id": "x", "name": MARKUP})
    _login(client, api_key)
    page = client.get(f"/console/activity/{record_id}").get_data(as_text=True)
    assert '<span class="badge badge-complaint">Complaint</span>' in page
    # Labels in words, whatever the key.
    assert "<dt>Feedback type</dt>" in page and ">abuse</dd>" in page
    assert "<dt>Last at</dt>" in page and "lastAt" not in page
    assert f'<time datetime="{LAST_AT}">2026-11-25 08:30:00 UTC</time>' in page
    assert MARKUP not in page and "&lt;img src=x onerror=alert(1)&gt;</dd>" in page
    for path in ("/console/templates", "/console/templates/x", "/console/templates/x/edit"):
        page = client.get(path).get_data(as_text=True)
        assert MARKUP not in page and "&lt;img src=x onerror=alert(1)&gt;" in page, path


def test_the_time_range_takes_days_or_minutes_in_utc(client, auth, api_key):
    tid = _send(client, auth, subject="In range")
    created = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).get_json()["createdAt"]
    now = datetime.fromisoformat(created.replace("Z", "+00:00"))
    _login(client, api_key)

    def shown(**bounds):
        page = client.get("/console/activity", query_string=bounds).get_data(as_text=True)
        return "In range" in page

    minute = "%Y-%m-%dT%H:%M"
    assert shown(since=(now - timedelta(minutes=1)).strftime(minute))
    assert not shown(since=(now + timedelta(minutes=2)).strftime(minute))
    assert shown(until=now.strftime(minute))  # to the end of that minute
    assert not shown(until=(now - timedelta(minutes=2)).strftime(minute))
    assert shown(since=now.strftime("%Y-%m-%d"), until=now.strftime("%Y-%m-%d"))
    assert not shown(until=(now - timedelta(days=1)).strftime("%Y-%m-%d"))
    page = client.get("/console/activity?since=yesterday").get_data(as_text=True)
    assert "Not a date and time: yesterday" in page and "In range" in page
