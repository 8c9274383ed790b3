"""Errors on the pages are pages in the site's look; everywhere else they stay the API's body."""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from html.parser import HTMLParser

import pytest

from layang.db import database
from layang.serving.app import create_app
from tests.delivery.test_crash import free_port
from tests.support.browser import screenshot

FORM_EXPIRED = "The form expired; reload the page and try again."


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        if data.strip():
            self.parts.append(" ".join(data.split()))


def text_of(response) -> str:
    """What a person reads on the page."""
    parser = _Text()
    parser.feed(response.get_data(as_text=True))
    return " ".join(parser.parts)


def assert_page(response, status: int, *phrases: str) -> str:
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "text/html"
    assert response.headers["X-Frame-Options"] == "DENY"
    html = response.get_data(as_text=True)
    assert "/static/layang.css" in html  # the site's stylesheet, so the site's look
    text = text_of(response)
    for phrase in phrases:
        assert phrase in text, text
    return html


def sign_in(client, api_key: str) -> None:
    page = client.get("/console/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    response = client.post("/console/login", data={"csrf_token": token, "api_key": api_key})
    assert response.status_code == 302


def test_unknown_console_paths_and_records_are_a_not_found_page(client, api_key):
    for path in ("/console/nowhere", "/console/", "/console/activity/a/b", "/console/x.json"):
        assert_page(client.get(path), 404, "Not found", "There is nothing here")
    sign_in(client, api_key)
    html = assert_page(client.get("/console/activity/no-such-record"), 404, "Not found")
    assert 'href="/console/activity"' in html  # a way back into the console
    assert_page(client.get("/console/templates/no-such-template"), 404, "Not found")


def test_consent_paths_that_match_no_token_are_its_invalid_link_page(client):
    for path in ("/consent", "/consent/"):
        assert_page(client.get(path), 404, "This link is not valid any more")
    assert_page(client.get("/consent/a/b"), 404, "This link is not valid any more")


def test_a_wrong_method_on_a_page_is_a_405_page(client):
    response = client.get("/console/logout")  # a form's address, typed into the address bar
    assert_page(response, 405, "Not allowed", "This page does not take GET requests.")
    assert "POST" in response.headers["Allow"] and "GET" not in response.headers["Allow"]
    response = client.delete("/consent/some-token")
    assert_page(response, 405, "Not allowed")
    assert {"GET", "POST"} <= set(response.headers["Allow"].split(", "))


def test_console_form_with_a_bad_csrf_token_is_a_form_expired_page(client, api_key):
    sign_in(client, api_key)
    for token in (None, "forged"):
        data = {"email": "x@rcpt.test"} | ({"csrf_token": token} if token else {})
        response = client.post("/console/recipients", data=data)
        html = assert_page(response, 400, FORM_EXPIRED)
        assert 'href="/console/recipients"' in html
    assert "x@rcpt.test" not in client.get("/console/recipients").get_data(as_text=True)
    # A form whose address is not a page sends you back to the console.
    html = assert_page(client.post("/console/logout", data={}), 400, FORM_EXPIRED)
    assert 'href="/console"' in html
    # The sign-in form keeps where it was going.
    response = client.post("/console/login?next=/console/templates", data={"api_key": api_key})
    html = assert_page(response, 400, FORM_EXPIRED)
    assert 'href="/console/login?next=/console/templates"' in html


def test_consent_form_with_a_bad_csrf_token_is_a_form_expired_page(client):
    response = client.post("/consent/some-token", data={"csrf_token": "forged"})
    html = assert_page(response, 400, FORM_EXPIRED)
    assert 'href="/consent/some-token"' in html


def test_a_failing_page_is_a_500_page_without_a_trace(config, caplog):
    app = create_app(config)

    # The endpoint's name puts the view in the web blueprint, as every console page is.
    @app.get("/console/boom", endpoint="web.boom")
    def boom():
        raise RuntimeError("secret internals")

    with caplog.at_level(logging.ERROR, logger="layang.web"):
        response = app.test_client().get("/console/boom")
    html = assert_page(response, 500, "Something went wrong; it has been logged.")
    assert "secret internals" not in html and "Traceback" not in html
    assert any(r.exc_info and "secret internals" in str(r.exc_info[1]) for r in caplog.records)


@pytest.fixture
def database_down(config):
    """The app on a PostgreSQL server that cannot be reached: nothing listens on its port."""
    url = f"postgresql://layang@127.0.0.1:{free_port()}/layang?connect_timeout=2"
    app = create_app(replace(config, database_url=url))
    yield app.test_client()
    if not database.is_closed():
        database.close()


def test_pages_while_the_database_is_down_are_a_503_page(database_down):
    for path in ("/console/activity", "/console/login", "/consent/some-token"):
        response = database_down.get(path)
        assert_page(response, 503, "Unavailable right now", "try again in a moment")
        assert response.headers["Retry-After"] == "5"
    # The API next to them keeps its error body.
    response = database_down.get("/v1/layang/activity")
    assert response.status_code == 503 and response.headers["Retry-After"] == "5"
    assert response.get_json()["error"] == "service_unavailable"


def test_not_found_page_in_a_browser(app, browser, live_server, api_key):
    page = browser.new_page()
    response = page.goto(live_server + "/console/no-such-page")
    assert response.status == 404
    assert response.headers["content-type"].startswith("text/html")
    assert page.locator("h1").inner_text() == "Not found"
    link = page.get_by_role("link", name="Back to the console")
    # Our stylesheet is served and applied: the link is the accent-coloured primary button.
    color = link.evaluate("a => getComputedStyle(a).backgroundColor")
    assert color == "rgb(35, 87, 217)", color
    shot = screenshot(page, "console-not-found")
    assert shot.stat().st_size > 3000
    link.click()
    page.wait_for_load_state()
    assert "/console/login" in page.url  # not signed in: the console asks for a key
    page.close()


def test_the_favicon_is_served(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 200 and response.mimetype == "image/svg+xml"
    assert response.data.startswith(b"<svg")
