"""The console, as a person uses it in headless Chromium, and its protections."""

from __future__ import annotations

import re

from layang.domain import accounts
from tests.conftest import drain
from tests.support.browser import ARTIFACTS, screenshot

SHIPPED = {
    "id": "shipped",
    "name": "Order shipped",
    "subject": "Order {{order}} shipped",
    "bodyHtml": "<html><body><p style='color:#123'>Hi {{name}}</p></body></html>",
    "bodyText": "Hi {{name}}",
}


def setup_data(client, upstream, relay_to):
    acme = accounts.create_account("acme", live=True)
    key = accounts.create_api_key(acme)[1]
    auth = {"Authorization": f"Bearer {key}"}
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@acme.test"},
            "subject": "Welcome aboard",
            "to": [{"email": "ana@rcpt.test"}],
            "bodyText": "hi",
        },
    )
    assert response.status_code == 200
    drain(relay_to(upstream))
    assert client.post("/v1/layang/templates", json=SHIPPED, headers=auth).status_code == 201
    other = accounts.create_account("other")
    return key, accounts.create_api_key(other)[1]


def sign_in(page, base, key):
    page.goto(base + "/console")
    assert "/console/login" in page.url
    page.fill("input[type=password]", key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()


def test_console_in_a_browser(client, upstream, relay_to, browser, live_server):
    acme_key, other_key = setup_data(client, upstream, relay_to)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    sign_in(page, live_server, acme_key)
    assert page.url.endswith("/console/overview")  # the console opens on the overview
    page.get_by_role("link", name="Activity").click()
    page.wait_for_load_state()

    row = page.locator("table.list tbody tr").filter(has_text="ana@rcpt.test")
    assert row.count() == 1
    assert row.locator(".badge").first.inner_text() == "Delivery"
    assert "Welcome aboard" in row.inner_text()
    screenshot(page, "console-activity")

    page.get_by_role("link", name="ana@rcpt.test").click()
    page.wait_for_load_state()
    timeline = page.locator("ol.timeline").inner_text()
    assert "Injection" in timeline and "Delivery" in timeline
    assert re.search(r"250 2\.0\.0", timeline)
    screenshot(page, "console-timeline")

    page.get_by_role("link", name="Authorized recipients").click()
    page.fill("input[name=email]", "bea@rcpt.test")
    page.fill("input[name=name]", "Bea")
    page.get_by_role("button", name="Add recipient").click()
    page.wait_for_load_state()
    assert "Verification email sent to bea@rcpt.test" in page.locator(".flash").inner_text()
    row = page.locator("table.list tbody tr").filter(has_text="bea@rcpt.test")
    assert row.locator(".badge").inner_text() == "unverified"
    screenshot(page, "console-recipients")

    page.get_by_role("link", name="Templates").click()
    page.get_by_role("link", name="shipped").click()
    page.wait_for_load_state()
    assert "Order {{order}} shipped" in page.locator("pre.source").first.inner_text()
    page.fill("textarea[name=data]", '{"order": "A-42", "name": "Ana"}')
    page.get_by_role("button", name="Preview").click()
    page.wait_for_load_state()
    assert page.locator(".rendered-subject").inner_text() == "Order A-42 shipped"
    assert page.locator(".rendered-text").inner_text() == "Hi Ana"
    frame = page.frame_locator("iframe.rendered-html")
    assert frame.locator("p").inner_text() == "Hi Ana"
    screenshot(page, "console-template-preview")
    # A full-page capture does not paint the frame; keep the frame's own picture too.
    page.locator("iframe.rendered-html").screenshot(
        path=str(ARTIFACTS / "console-template-preview-frame.png")
    )

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_load_state()
    assert "/console/login" in page.url
    page.goto(live_server + "/console/activity")
    assert "/console/login" in page.url

    # The other account sees none of acme's data.
    sign_in(page, live_server, other_key)
    page.goto(live_server + "/console/activity")
    assert "No emails match." in page.locator("main").inner_text()
    page.goto(live_server + "/console/recipients")
    assert "bea@rcpt.test" not in page.locator("main").inner_text()
    page.goto(live_server + "/console/templates")
    assert "shipped" not in page.locator("main").inner_text()
    response = page.goto(live_server + "/console/templates/shipped")
    assert response.status == 404
    screenshot(page, "console-other-account")
    context.close()


def _login(client, key):
    page = client.get("/console/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    return client.post("/console/login", data={"csrf_token": token, "api_key": key}), token


def test_session_cookie_and_csrf(client, account, api_key):
    response, token = _login(client, api_key)
    assert response.status_code == 302
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie
    assert api_key not in cookie
    # A form posted without the session's CSRF token is refused and changes nothing.
    refused = client.post("/console/recipients", data={"email": "x@rcpt.test"})
    assert refused.status_code == 400
    assert "x@rcpt.test" not in client.get("/console/recipients").get_data(as_text=True)
    # Signing in replaced the token; the pages carry the new one.
    page = client.get("/console/recipients").get_data(as_text=True)
    fresh = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert fresh != token
    assert (
        client.post(
            "/console/recipients", data={"email": "x@rcpt.test", "csrf_token": token}
        ).status_code
        == 400
    )
    added = client.post("/console/recipients", data={"email": "x@rcpt.test", "csrf_token": fresh})
    assert added.status_code == 302
    assert "x@rcpt.test" in client.get("/console/recipients").get_data(as_text=True)


def test_wrong_key_and_revoked_key(client, account, api_key):
    response, _ = _login(client, "lyg_" + "x" * 43)
    assert response.status_code == 401
    assert "unknown or revoked" in response.get_data(as_text=True)
    response, _ = _login(client, api_key)
    assert client.get("/console/activity").status_code == 200
    accounts.revoke_api_key(accounts.list_api_keys(account)[0].id)
    assert client.get("/console/activity").status_code == 302  # the session ended with the key


def test_no_open_redirect_after_sign_in(app, account, api_key):
    for target in ("https://evil.test/", "//evil.test/x", "/v1/layang/activity"):
        client = app.test_client()
        page = client.get(f"/console/login?next={target}").get_data(as_text=True)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        response = client.post(
            f"/console/login?next={target}", data={"csrf_token": token, "api_key": api_key}
        )
        assert response.status_code == 302
        assert response.headers["Location"] == "/console/overview", target


def test_a_send_key_cannot_sign_in_and_a_read_key_only_looks(client, account):
    send_key = accounts.create_api_key(account, scope="send")[1]
    response, _ = _login(client, send_key)
    assert response.status_code == 401
    assert "may only send mail" in response.get_data(as_text=True)
    assert client.get("/console/activity").status_code == 302

    read_key = accounts.create_api_key(account, scope="read")[1]
    response, _ = _login(client, read_key)
    assert response.status_code == 302
    page = client.get("/console/recipients")
    assert page.status_code == 200
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.get_data(as_text=True)).group(1)
    refused = client.post("/console/recipients", data={"email": "x@rcpt.test", "csrf_token": token})
    assert refused.status_code == 403
    assert "needs scope &#39;full&#39;" in refused.get_data(as_text=True)
    assert "x@rcpt.test" not in client.get("/console/recipients").get_data(as_text=True)


def test_the_root_leads_to_the_console(client):
    response = client.get("/")
    assert response.status_code == 302
    assert response.headers["Location"] == "/console"


def test_signing_out_ends_the_session_on_the_server(app, client, account, api_key):
    response, _ = _login(client, api_key)
    assert response.status_code == 302
    copied = client.get_cookie("layang_session").value
    assert client.get("/console/activity").status_code == 200
    page = client.get("/console/activity").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    signed_out = client.post("/console/logout", data={"csrf_token": token})
    assert signed_out.status_code == 302

    # Someone who kept a copy of the cookie is not signed in with it any more.
    replayed = app.test_client()
    replayed.set_cookie("layang_session", copied)
    again = replayed.get("/console/activity")
    assert again.status_code == 302 and "/console/login" in again.headers["Location"]
