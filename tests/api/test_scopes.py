"""Key scopes (docs/api.md), on every operation the OpenAPI document lists: a read key may only
read, a send key may only send, anything else is 403 ``forbidden`` naming the scope needed."""

from __future__ import annotations

import re

import pytest

from layang.domain import accounts

SEND_OPERATIONS = {("post", "/v1/layang/transmissions")}


def operations(client):
    document = client.get("/openapi.json").get_json()
    for path, item in document["paths"].items():
        for method in item:
            if method in ("get", "post", "put", "patch", "delete", "head"):
                yield method, path


def needed(method, path):
    if (method, path) in SEND_OPERATIONS:
        return "send"
    return "read" if method in ("get", "head") else "full"


@pytest.fixture
def keys(account):
    return {
        scope: {"Authorization": f"Bearer {accounts.create_api_key(account, scope=scope)[1]}"}
        for scope in ("full", "send", "read")
    }


def test_every_operation_enforces_its_scope(client, keys):
    walked = list(operations(client))
    assert len(walked) >= 12, walked  # the document is the API, not an empty page
    assert set(walked) >= SEND_OPERATIONS
    for method, template in walked:
        path = re.sub(r"\{[^}]+\}", "nothing-here", template)
        for scope, auth in keys.items():
            response = client.open(path, method=method.upper(), headers=auth, json={})
            allowed = scope == "full" or scope == needed(method, template)
            if allowed:
                assert response.status_code != 403, (scope, method, path)
            else:
                assert response.status_code == 403, (scope, method, path, response.status_code)
                body = response.get_json()
                assert body["error"] == "forbidden" and body["status"] == 403
                assert f"'{needed(method, template)}'" in body["message"], body["message"]


def test_a_send_key_sends_and_a_read_key_reads_what_was_sent(client, keys):
    sent = client.post(
        "/v1/layang/transmissions",
        headers=keys["send"],
        json={
            "from": {"email": "shop@sender.test"},
            "subject": "Hi",
            "to": [{"email": "ana@rcpt.test"}],
            "bodyText": "x",
        },
    )
    assert sent.status_code == 200
    tid = sent.get_json()["transmissionId"]
    assert client.get(f"/v1/layang/transmissions/{tid}", headers=keys["read"]).status_code == 200
    refused = client.get(f"/v1/layang/transmissions/{tid}", headers=keys["send"])
    assert refused.status_code == 403
    assert refused.get_json()["message"] == (
        "This API key has scope 'send'; this needs scope 'read' or 'full'."
    )


def test_unknown_urls_and_methods_stay_404_and_405(client, keys):
    assert client.get("/v1/layang/nothing", headers=keys["send"]).status_code == 404
    assert client.delete("/v1/layang/transmissions", headers=keys["read"]).status_code == 405
