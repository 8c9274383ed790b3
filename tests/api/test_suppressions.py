"""``/v1/layang/suppressions``: list, search, add, look up and remove suppressed addresses."""

from __future__ import annotations

import pytest

from layang.domain import accounts
from layang.models import Suppression
from tests.conftest import BACKENDS

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

URL = "/v1/layang/suppressions"


def put(client, auth, email, **body):
    response = client.put(f"{URL}/{email}", json=body, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_put_get_delete(client, auth):
    entry = put(client, auth, "Ana@Example.ORG", note="asked by phone")
    assert set(entry) == {"email", "reason", "transmissionId", "detail", "note", "createdAt"}
    assert entry["email"] == "Ana@example.org"
    assert entry["reason"] == "manual" and entry["transmissionId"] is None
    assert entry["note"] == "asked by phone" and entry["detail"] == ""
    assert entry["createdAt"].endswith("Z")

    # Any case finds it; a second PUT replaces it and keeps its creation time.
    assert client.get(f"{URL}/ana@EXAMPLE.org", headers=auth).get_json() == entry
    again = put(client, auth, "ana@example.org", reason="unsubscribe")
    assert again["reason"] == "unsubscribe" and again["note"] == ""
    assert again["createdAt"] == entry["createdAt"]
    assert Suppression.select().count() == 1

    assert client.delete(f"{URL}/ANA@example.org", headers=auth).status_code == 204
    missing = client.get(f"{URL}/ana@example.org", headers=auth)
    assert missing.status_code == 404
    assert missing.get_json() == {
        "error": "not_found",
        "message": "ana@example.org is not on the suppression list.",
        "status": 404,
    }
    assert client.delete(f"{URL}/ana@example.org", headers=auth).status_code == 404


def test_list_searches_filters_and_pages(client, auth):
    for n in range(5):
        put(client, auth, f"user{n}@shop.example")
    put(client, auth, "100%_real@other.example", reason="unsubscribe")

    everything = client.get(URL, headers=auth).get_json()
    assert everything["items"][0]["email"] == "100%_real@other.example"  # newest first
    assert len(everything["items"]) == 6 and everything["nextCursor"] is None

    def emails(query):
        body = client.get(f"{URL}?{query}", headers=auth).get_json()
        return sorted(e["email"] for e in body["items"])

    assert emails("email=SHOP.example") == [f"user{n}@shop.example" for n in range(5)]
    assert emails("email=user3") == ["user3@shop.example"]
    assert emails("email=%25_") == ["100%_real@other.example"]  # % and _ are plain text
    assert emails("reason=unsubscribe") == ["100%_real@other.example"]
    assert emails("reason=hard_bounce") == []

    seen, cursor = [], None
    while True:
        query = "limit=2" + (f"&cursor={cursor}" if cursor else "")
        page = client.get(f"{URL}?{query}", headers=auth).get_json()
        seen += [e["email"] for e in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == [e["email"] for e in everything["items"]]


@pytest.mark.parametrize(
    ("method", "path", "body", "field"),
    [
        ("put", f"{URL}/not-an-address", {}, "email"),
        ("get", f"{URL}/not-an-address", None, "email"),
        ("put", f"{URL}/ana@example.org", {"reason": "hard_bounce"}, "reason"),
        ("put", f"{URL}/ana@example.org", {"note": 5}, "note"),
        ("put", f"{URL}/ana@example.org", {"colour": "red"}, "colour"),
        ("get", f"{URL}?reason=angry", None, "reason"),
        ("get", f"{URL}?limit=0", None, "limit"),
    ],
)
def test_validation_names_the_field(client, auth, method, path, body, field):
    response = client.open(path, method=method.upper(), json=body, headers=auth)
    assert response.status_code == 400, response.get_json()
    answer = response.get_json()
    assert answer["error"] == "validation_failed"
    assert answer["message"].startswith(f"{field}: ")
    assert field in answer["errors"]


def test_a_read_key_reads_and_cannot_change(client, auth, account):
    put(client, auth, "ana@example.org")
    read = {"Authorization": f"Bearer {accounts.create_api_key(account, scope='read')[1]}"}
    assert client.get(f"{URL}/ana@example.org", headers=read).status_code == 200
    refused = client.delete(f"{URL}/ana@example.org", headers=read)
    assert refused.status_code == 403 and refused.get_json()["error"] == "forbidden"
    assert client.put(f"{URL}/bo@example.org", json={}, headers=read).status_code == 403
