"""The console's template preview reads sample data as free-form JSON: too deep is an error on
the page, never a 500."""

from __future__ import annotations

import html
import re

import pytest

from tests.web.test_console import _login

TEMPLATE = {"id": "welcome", "name": "Welcome", "subject": "Hi {{name}}", "bodyText": "Hello"}


def _page_token(client, api_key):
    _login(client, api_key)
    page = client.get("/console/templates/welcome").get_data(as_text=True)
    return re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)


@pytest.mark.parametrize("depth", [33, 900, 50_000])
def test_sample_data_nested_too_deep_is_named_on_the_page(client, auth, api_key, depth):
    created = client.post("/v1/layang/templates", json=TEMPLATE, headers=auth)
    assert created.status_code == 201, created.get_json()
    token = _page_token(client, api_key)
    nested = '{"name": "Ana", "x": ' + '{"a":' * (depth - 1) + "1" + "}" * depth  # depth levels
    page = client.post("/console/templates/welcome", data={"data": nested, "csrf_token": token})
    assert page.status_code == 200
    text = html.unescape(page.get_data(as_text=True))
    assert "Sample data is nested more than 32 levels deep." in text
    assert "Hi Ana" not in text


def test_sample_data_32_levels_deep_is_rendered(client, auth, api_key):
    created = client.post("/v1/layang/templates", json=TEMPLATE, headers=auth)
    assert created.status_code == 201, created.get_json()
    token = _page_token(client, api_key)
    nested = '{"name": "Ana", "x": ' + '{"a":' * 31 + "1" + "}" * 32
    page = client.post("/console/templates/welcome", data={"data": nested, "csrf_token": token})
    text = html.unescape(page.get_data(as_text=True))
    assert "Hi Ana" in text and "nested more" not in text
