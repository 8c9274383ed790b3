"""Every endpoint that reads a JSON body refuses members nested past 32 levels with a 400 naming
the member, as the send endpoint does, never a RecursionError or a 500."""

from __future__ import annotations

import json

import pytest

from tests.api.test_transmissions import assert_error, create_template

DEEP = 900
NESTED = '{"a":' * DEEP + "1" + "}" * DEEP
MARK = '"NESTED"'


def with_nested(body: dict, member: str) -> str:
    """``body`` as JSON with ``member`` replaced by an object ``DEEP`` levels deep."""
    return json.dumps({**body, member: "NESTED"}).replace(MARK, NESTED)


TEMPLATE = {"name": "Welcome", "subject": "Hi {{name}}", "bodyText": "Hello {{name}}"}
CASES = [
    ("post", "/v1/layang/templates/welcome/preview", {"substitutionData": {}}, "substitutionData"),
    ("post", "/v1/layang/templates/welcome/preview", {}, "extra"),
    ("post", "/v1/layang/templates", {**TEMPLATE, "id": "other"}, "name"),
    ("post", "/v1/layang/templates", {**TEMPLATE, "id": "other"}, "extra"),
    ("put", "/v1/layang/templates/welcome", TEMPLATE, "subject"),
    ("post", "/v1/layang/sandbox/authorized-recipients", {"email": "a@rcpt.test"}, "name"),
    ("post", "/v1/layang/sandbox/authorized-recipients", {}, "email"),
    ("post", "/v1/layang/domains", {}, "domain"),
]


@pytest.mark.parametrize(("method", "url", "body", "member"), CASES)
def test_a_member_nested_too_deep_is_a_400_naming_it(client, auth, method, url, body, member):
    create_template(client, auth, id="welcome", **TEMPLATE)
    response = getattr(client, method)(
        url, data=with_nested(body, member), content_type="application/json", headers=auth
    )
    assert len(response.get_data()) < 500
    error = assert_error(response, 400, "validation_failed", member)
    assert error["message"] == f"{member}: Nested more than 32 levels deep."


@pytest.mark.parametrize(("depth", "status"), [(32, 200), (33, 400), (50_000, 400)])
def test_preview_takes_substitution_data_up_to_32_levels(client, auth, depth, status):
    create_template(client, auth, id="welcome", **TEMPLATE)
    data = '{"name": "Ana", "x": ' + '{"a":' * (depth - 1) + "1" + "}" * depth  # depth levels
    response = client.post(
        "/v1/layang/templates/welcome/preview",
        data='{"substitutionData": ' + data + "}",
        content_type="application/json",
        headers=auth,
    )
    if status == 200:
        assert response.status_code == 200, response.get_json()
        assert response.get_json()["subject"] == "Hi Ana"
    elif depth < 1000:
        assert_error(response, 400, "validation_failed", "substitutionData")
    else:  # deeper than the JSON parser reads: the body as a whole is refused
        assert "32 levels" in assert_error(response, 400, "malformed_json")["message"]
