"""The OpenAPI document describes what the views really answer: every key of a real response is
a property of the documented response schema, at every depth."""

from __future__ import annotations

from typing import Any

import pytest

from layang.domain import accounts
from layang.models import AuthorizedRecipient
from tests.conftest import drain

BASE = "/v1/layang"


def documented(spec: dict[str, Any], path: str, method: str, status: int) -> dict[str, Any]:
    return spec["paths"][BASE + path][method]["responses"][str(status)]


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def undocumented_keys(spec: dict[str, Any], schema: dict[str, Any], value: Any, at: str) -> list:
    """Paths of the keys of ``value`` that ``schema`` does not name."""
    schema = resolve(spec, schema)
    found = []
    if isinstance(value, dict) and "properties" in schema:
        for key, item in value.items():
            if key not in schema["properties"]:
                found.append(f"{at}.{key}")
            else:
                found += undocumented_keys(spec, schema["properties"][key], item, f"{at}.{key}")
    elif isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += undocumented_keys(spec, schema["items"], item, f"{at}[{index}]")
    return found


def assert_documented(spec, path, method, response, status=200) -> dict[str, Any]:
    assert response.status_code == status, response.get_json()
    schema = documented(spec, path, method, status)["content"]["application/json"]["schema"]
    body = response.get_json()
    assert resolve(spec, schema).get("properties"), f"{method} {path} documents no properties"
    assert undocumented_keys(spec, schema, body, "body") == []
    return body


@pytest.fixture
def spec(client) -> dict[str, Any]:
    return client.get("/openapi.json").get_json()


def test_an_undocumented_key_is_found(client, spec):
    schema = {"$ref": "#/components/schemas/ActivityPage"}
    body = {"items": [{"id": "x", "from": {"email": "a@b.test", "nick": "a"}}], "extra": 1}
    assert undocumented_keys(spec, schema, body, "body") == [
        "body.items[0].from.nick",
        "body.extra",
    ]


def test_templates(client, auth, spec):
    template = {"id": "t", "name": "T", "subject": "Hi {{name}}", "bodyText": "{{a.b}}"}
    created = client.post(f"{BASE}/templates", json=template, headers=auth)
    body = assert_documented(spec, "/templates", "post", created, 201)
    assert set(body) == {
        "id",
        "name",
        "subject",
        "bodyHtml",
        "bodyText",
        "version",
        "shortcodes",
        "createdAt",
        "updatedAt",
    }
    got = client.get(f"{BASE}/templates/t", headers=auth)
    assert_documented(spec, "/templates/{template_id}", "get", got)
    put = client.put(f"{BASE}/templates/t", json={"bodyHtml": "<p>x</p>"}, headers=auth)
    assert_documented(spec, "/templates/{template_id}", "put", put)
    listed = client.get(f"{BASE}/templates", headers=auth)
    assert set(assert_documented(spec, "/templates", "get", listed)) == {"items", "nextCursor"}
    preview = client.post(f"{BASE}/templates/t/preview", json={}, headers=auth)
    assert_documented(spec, "/templates/{template_id}/preview", "post", preview)

    for path, method, status in [
        ("/templates", "post", 201),
        ("/templates/{template_id}", "get", 200),
        ("/templates/{template_id}", "put", 200),
    ]:
        assert "ETag" in documented(spec, path, method, status)["headers"]


def test_activity_and_transmission(client, auth, spec, upstream, relay_to):
    sent = client.post(
        f"{BASE}/transmissions",
        json={
            "from": {"email": "shop@sender.test", "name": "Shop"},
            "subject": "Hello",
            "to": [{"email": "ana@rcpt.test"}],
            "bodyText": "hi",
            "metadata": {"order": "42"},
        },
        headers=auth,
    )
    tid = sent.get_json()["transmissionId"]
    drain(relay_to(upstream))
    page = client.get(f"{BASE}/activity", headers=auth)
    body = assert_documented(spec, "/activity", "get", page)
    assert {"from", "events", "createdAt"} <= set(body["items"][0])
    view = client.get(f"{BASE}/transmissions/{tid}", headers=auth)
    body = assert_documented(spec, "/transmissions/{transmission_id}", "get", view)
    assert {"transmissionId", "createdAt", "source", "from", "subject", "recipients"} == set(body)


def test_authorized_recipients(app, client, spec):
    sandbox = accounts.create_account("sandbox", live=False)
    auth = {"Authorization": f"Bearer {accounts.create_api_key(sandbox, 'tests')[1]}"}
    path = "/sandbox/authorized-recipients"
    added = client.post(f"{BASE}{path}", json={"email": "ana@rcpt.test"}, headers=auth)
    body = assert_documented(spec, path, "post", added, 201)
    AuthorizedRecipient.update(status="verified", verified_at=1).where(
        AuthorizedRecipient.id == body["id"]
    ).execute()
    got = client.get(f"{BASE}{path}/{body['id']}", headers=auth)
    assert_documented(spec, path + "/{recipient_id}", "get", got)
    assert got.get_json()["verifiedAt"] == "1970-01-01T00:00:00.001Z"
    listed = client.get(f"{BASE}{path}", headers=auth)
    assert_documented(spec, path, "get", listed)


def test_the_description_is_current_and_the_examples_are_realistic(client, auth, spec):
    import re

    description = spec["info"]["description"]
    for tag in spec["tags"]:
        assert tag["name"].replace("_", " ") in description, tag["name"]
    patterned = [
        (name, prop, schema)
        for name, component in spec["components"]["schemas"].items()
        for prop, schema in component.get("properties", {}).items()
        if "pattern" in schema
    ]
    assert patterned  # else the check below checks nothing
    for name, prop, schema in patterned:
        # Without an example, the docs' "Try it out" makes one up from the pattern.
        assert re.fullmatch(schema["pattern"], schema.get("example", "")), (name, prop)

    # The examples make a message the API accepts.
    attachment = spec["components"]["schemas"]["Attachment"]["properties"]
    address = spec["components"]["schemas"]["Address"]["properties"]
    sent = client.post(
        f"{BASE}/transmissions",
        headers=auth,
        json={
            "from": {"email": "sandbox@sandbox.layang.test"},
            "to": {"email": "success@simulator.layang.test", "name": address["name"]["example"]},
            "subject": "Invoice",
            "bodyText": "Attached.",
            "attachments": [
                {k: attachment[k]["example"] for k in ("filename", "mimeType", "value")}
            ],
        },
    )
    assert sent.status_code == 200, sent.get_json()
