"""/v1/layang/templates over HTTP, and sending with a templateId."""

from __future__ import annotations

import pytest

from layang.domain import accounts
from tests.conftest import drain

URL = "/v1/layang/templates"
HTML = """<!DOCTYPE html>
<html><head><style>
  a { color: #2357d9; }
  p.note { font-size: 14px; }
  @media (max-width: 600px) { p.note { font-size: 18px; } }
</style></head>
<body>
  <p class="note">Hello {{ user.first }}, your order {{order}} shipped.</p>
  <p>{{{signature}}}</p>
  <a href="https://shop.test/track/{{ order }}?who={{user.first}}">Track it</a>
  <img src="{{logo}}" alt="logo">
  {% for item in items %}<p>{{ loop.index }}. {{ item.name }}</p>{% endfor %}
  {% if vip %}<p>Thanks for being a VIP.</p>{% endif %}
</body></html>"""
DATA = {
    "user": {"first": "Ana <Admin>"},
    "order": "A-42",
    "signature": "<b>The Shop</b>",
    "logo": "https://cdn.shop.test/logo.png",
    "items": [{"name": "Tea & Cake"}, {"name": "Mug"}],
    "vip": True,
}


def create(client, auth, **fields):
    body = {
        "id": "shipped",
        "name": "Order shipped",
        "subject": "Order {{order}} shipped",
        "bodyHtml": HTML,
        "bodyText": "Hi {{user.first}}, order {{order}} shipped.",
        **fields,
    }
    response = client.post(URL, json=body, headers=auth)
    assert response.status_code == 201, response.get_json()
    return response


def test_crud_lifecycle_with_etags(client, auth):
    created = create(client, auth)
    body = created.get_json()
    assert created.headers["ETag"] == '"shipped-v1"'
    assert body["version"] == 1 and body["id"] == "shipped"
    assert set(body["shortcodes"]) >= {"order", "user.first", "signature", "logo", "items", "vip"}
    assert "item" not in body["shortcodes"]
    assert body["createdAt"].endswith("Z")

    got = client.get(f"{URL}/shipped", headers=auth)
    assert got.status_code == 200 and got.headers["ETag"] == '"shipped-v1"'
    assert got.get_json()["bodyHtml"] == HTML  # the source as sent; inlining is for sending

    update = client.put(
        f"{URL}/shipped",
        json={"subject": "Shipped: {{order}}"},
        headers={**auth, "If-Match": '"shipped-v1"'},
    )
    assert update.status_code == 200, update.get_json()
    assert update.get_json()["version"] == 2
    assert update.get_json()["bodyText"] == "Hi {{user.first}}, order {{order}} shipped."
    assert update.headers["ETag"] == '"shipped-v2"'

    stale = client.put(
        f"{URL}/shipped", json={"name": "Again"}, headers={**auth, "If-Match": '"shipped-v1"'}
    )
    assert stale.status_code == 412
    assert stale.get_json()["error"] == "precondition_failed"
    assert (
        client.put(f"{URL}/shipped", json={"name": "No If-Match"}, headers=auth).status_code == 200
    )

    assert client.delete(f"{URL}/shipped", headers=auth).status_code == 204
    gone = client.get(f"{URL}/shipped", headers=auth)
    assert gone.status_code == 404 and gone.get_json()["error"] == "not_found"


def test_generated_ids_duplicates_and_listing(client, auth):
    generated = client.post(URL, json={"name": "No id", "bodyText": "x"}, headers=auth)
    assert generated.status_code == 201
    assert generated.get_json()["id"]
    create(client, auth)
    duplicate = client.post(URL, json={"id": "shipped", "name": "x", "bodyText": "x"}, headers=auth)
    assert duplicate.status_code == 409 and duplicate.get_json()["error"] == "conflict"
    create(client, auth, id="another")
    seen, cursor = [], None
    while True:
        query = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = client.get(URL, query_string=query, headers=auth).get_json()
        seen += [t["id"] for t in page["items"]]
        cursor = page["nextCursor"]
        if not cursor:
            break
    assert sorted(seen) == sorted(["another", "shipped", generated.get_json()["id"]])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"id": "Bad Id", "name": "x", "bodyText": "x"}, "id"),
        ({"id": "ok", "bodyText": "x"}, "name"),
        ({"id": "ok", "name": "x", "bodyHtml": "<p>\n{{ name </p>"}, "bodyHtml"),
        ({"id": "ok", "name": "x", "subject": "{% if %}", "bodyText": "x"}, "subject"),
    ],
)
def test_bad_templates_are_400_naming_the_field(client, auth, body, field):
    response = client.post(URL, json=body, headers=auth)
    assert response.status_code == 400, response.get_json()
    error = response.get_json()
    assert error["error"] == "validation_failed"
    assert field in error["errors"]
    assert error["message"].startswith(field)


def test_syntax_error_names_the_line(client, auth):
    response = client.post(
        URL,
        json={"id": "x", "name": "x", "bodyHtml": "<p>ok</p>\n<p>ok</p>\n<p>{{ broken </p>"},
        headers=auth,
    )
    assert response.status_code == 400
    assert "line 3" in response.get_json()["message"]


def test_preview_escapes_html_keeps_text_raw_and_links_intact(client, auth):
    create(client, auth)
    preview = client.post(f"{URL}/shipped/preview", json={"substitutionData": DATA}, headers=auth)
    assert preview.status_code == 200
    rendered = preview.get_json()
    assert rendered["subject"] == "Order A-42 shipped"
    assert rendered["bodyText"] == "Hi Ana <Admin>, order A-42 shipped."
    html = rendered["bodyHtml"]
    assert "Hello Ana &lt;Admin&gt;, your order A-42 shipped." in html
    assert "<b>The Shop</b>" in html
    assert 'href="https://shop.test/track/A-42?who=Ana' in html
    assert 'src="https://cdn.shop.test/logo.png"' in html
    assert "1. Tea &amp; Cake" in html and "2. Mug" in html
    assert "Thanks for being a VIP." in html
    assert "@media (max-width: 600px)" in html
    assert 'style="font-size:14px"' in html.replace("; ", ";").replace(": ", ":")
    empty = client.post(f"{URL}/shipped/preview", json={}, headers=auth).get_json()
    assert empty["subject"] == "Order  shipped"


def test_template_injection_through_the_api_leaks_nothing(client, auth):
    payloads = [
        "{{ ''.__class__.__mro__ }}",
        "{{ config }}",
        "{{ request.environ }}",
        "{{ cycler.__init__.__globals__ }}",
        "{{ lipsum.__globals__ }}",
        "{{ self.__dict__ }}",
        "{{ '%s' % user }}",
    ]
    for n, payload in enumerate(payloads):
        response = client.post(
            URL, json={"id": f"t{n}", "name": "x", "bodyText": payload}, headers=auth
        )
        if response.status_code == 201:
            preview = client.post(
                f"{URL}/t{n}/preview", json={"substitutionData": DATA}, headers=auth
            )
            assert preview.status_code in (200, 400)
            text = preview.get_data(as_text=True)
        else:
            assert response.status_code == 400
            text = response.get_data(as_text=True)
        for leak in ("<class", "module", "function", "SECRET", "environ", "os."):
            assert leak not in text, (payload, text)


def test_send_with_template_as_the_upstream_sees_it(client, auth, upstream, relay_to):
    create(client, auth)
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "to": [{"email": "ana@rcpt.test"}],
            "templateId": "shipped",
            "substitutionData": DATA,
            "bodyText": "",
            "bodyHtml": "",
            "cc": [],
            "metadata": {},
        },
    )
    assert response.status_code == 200, response.get_json()
    # The template changes before the worker relays: the accepted version is what goes out.
    client.put(f"{URL}/shipped", json={"subject": "CHANGED", "bodyText": "CHANGED"}, headers=auth)
    drain(relay_to(upstream))
    msg = upstream.received[0].message
    assert msg["Subject"] == "Order A-42 shipped"
    text = msg.get_body(("plain",)).get_content().strip()
    assert text == "Hi Ana <Admin>, order A-42 shipped."
    html = msg.get_body(("html",)).get_content()
    assert "Hello Ana &lt;Admin&gt;" in html
    assert 'href="https://shop.test/track/A-42?who=Ana' in html
    preview = client.post(
        f"{URL}/shipped/preview", json={"substitutionData": DATA}, headers=auth
    ).get_json()
    assert preview["subject"] == "CHANGED"


def test_request_subject_overrides_the_template(client, auth, upstream, relay_to):
    create(client, auth)
    client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "to": [{"email": "ana@rcpt.test"}],
            "subject": "Your parcel",
            "templateId": "shipped",
            "substitutionData": DATA,
        },
    )
    drain(relay_to(upstream))
    assert upstream.received[0].message["Subject"] == "Your parcel"


def test_template_without_subject_needs_one_in_the_request(client, auth):
    create(client, auth, id="nosubject", subject=None)
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "to": [{"email": "ana@rcpt.test"}],
            "templateId": "nosubject",
        },
    )
    assert response.status_code == 400
    assert "subject" in response.get_json()["errors"]


def test_templates_are_isolated_between_accounts(client, auth):
    create(client, auth)
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    assert client.get(f"{URL}/shipped", headers=other_auth).status_code == 404
    assert client.put(f"{URL}/shipped", json={"name": "x"}, headers=other_auth).status_code == 404
    assert client.delete(f"{URL}/shipped", headers=other_auth).status_code == 404
    assert client.post(f"{URL}/shipped/preview", json={}, headers=other_auth).status_code == 404
    assert client.get(URL, headers=other_auth).get_json()["items"] == []
    send = client.post(
        "/v1/layang/transmissions",
        headers=other_auth,
        json={
            "from": {"email": "a@b.test"},
            "to": [{"email": "c@d.test"}],
            "templateId": "shipped",
        },
    )
    assert send.status_code == 404
    assert send.get_json()["error"] == "template_not_found"
    # The same id is free in the other account.
    assert (
        client.post(
            URL, json={"id": "shipped", "name": "mine", "bodyText": "x"}, headers=other_auth
        ).status_code
        == 201
    )
