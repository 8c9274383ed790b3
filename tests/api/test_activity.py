"""Activity: records per email per recipient, filters, cursors, account isolation."""

from __future__ import annotations

import json
import re

from layang.domain import accounts
from layang.models import Transmission
from tests.conftest import drain

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


def send(client, auth, to, **extra):
    body = {
        "from": {"email": "shop@sender.test", "name": "Shop"},
        "subject": "Hello",
        "to": [{"email": a} for a in to],
        "bodyText": "hi",
        **extra,
    }
    response = client.post("/v1/layang/transmissions", json=body, headers=auth)
    assert response.status_code == 200
    return response.get_json()["transmissionId"]


def test_record_shape_after_delivery(client, auth, upstream, relay_to):
    tid = send(
        client, auth, ["ana@rcpt.test"], bcc=[{"email": "b@rcpt.test"}], metadata={"order": "42"}
    )
    drain(relay_to(upstream))
    page = client.get("/v1/layang/activity", headers=auth).get_json()
    assert page["nextCursor"] is None
    assert len(page["items"]) == 2
    record = next(r for r in page["items"] if r["recipient"] == "ana@rcpt.test")
    assert record["transmissionId"] == tid
    assert record["messageId"] == f"<{tid}@sender.test>"
    assert record["recipientType"] == "to"
    assert record["from"] == {"email": "shop@sender.test", "name": "Shop"}
    assert record["subject"] == "Hello"
    assert record["status"] == "Delivery"
    assert record["metadata"] == {"order": "42"}
    assert ISO.match(record["updatedAt"])
    assert [e["status"] for e in record["events"]] == ["Injection", "Delivery"]
    assert all(ISO.match(e["timestamp"]) for e in record["events"])
    assert record["events"][1]["detail"]["reply"].startswith("250")
    bcc = next(r for r in page["items"] if r["recipient"] == "b@rcpt.test")
    assert bcc["recipientType"] == "bcc"


def test_transmission_lookup(client, auth):
    tid = send(client, auth, ["a@rcpt.test", "b@rcpt.test"])
    body = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).get_json()
    assert body["transmissionId"] == tid
    assert body["subject"] == "Hello"
    assert body["from"]["email"] == "shop@sender.test"
    assert [r["recipient"] for r in body["recipients"]] == ["a@rcpt.test", "b@rcpt.test"]
    assert all(r["status"] == "Injection" for r in body["recipients"])


def test_newest_first_and_cursor_pagination(client, auth):
    ids = [send(client, auth, [f"r{n}@rcpt.test"]) for n in range(7)]
    seen, cursor = [], None
    while True:
        query = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = client.get("/v1/layang/activity", query_string=query, headers=auth).get_json()
        seen += [r["transmissionId"] for r in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


def test_filters(client, auth, upstream, relay_to):
    upstream.script_rcpt("bad@rcpt.test", "550 5.1.1 unknown")
    first = send(client, auth, ["good@rcpt.test", "bad@rcpt.test"])
    drain(relay_to(upstream))
    second = send(client, auth, ["Good@Rcpt.test"])

    def query(**q):
        page = client.get("/v1/layang/activity", query_string=q, headers=auth).get_json()
        return sorted((r["transmissionId"], r["recipient"]) for r in page["items"])

    assert query(status="Bounce") == [(first, "bad@rcpt.test")]
    assert query(status="Delivery") == [(first, "good@rcpt.test")]
    assert query(status="Injection") == [(second, "Good@rcpt.test")]
    assert len(query(recipient="GOOD@rcpt.test")) == 2
    assert query(recipient="good") == []  # a whole address…
    assert len(query(recipientContains="GOOD")) == 2  # …or part of one, as in the console
    assert len(query(recipientContains="rcpt.test")) == 3
    assert query(recipientContains="bad@", status="Bounce") == [(first, "bad@rcpt.test")]
    assert query(transmissionId=second) == [(second, "Good@rcpt.test")]
    assert query(status="Open") == []
    assert len(query(since="2000-01-01T00:00:00Z")) == 3
    assert query(until="2000-01-01T00:00:00Z") == []


def test_bad_query_parameters(client, auth):
    for q, field in [
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"status": "Lost"}, "status"),
        ({"since": "yesterday"}, "since"),
        ({"nope": 1}, "nope"),
        ({"recipientContains": ""}, "recipientContains"),
    ]:
        response = client.get("/v1/layang/activity", query_string=q, headers=auth)
        assert response.status_code == 400, q
        body = response.get_json()
        assert body["error"] == "validation_failed"
        assert field in body["errors"], body


def test_accounts_see_only_their_own(client, auth):
    tid = send(client, auth, ["a@rcpt.test"])
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    response = client.get(f"/v1/layang/transmissions/{tid}", headers=other_auth)
    assert response.status_code == 404
    assert response.get_json()["error"] == "not_found"
    assert client.get("/v1/layang/activity", headers=other_auth).get_json()["items"] == []
    page = client.get(
        "/v1/layang/activity", query_string={"transmissionId": tid}, headers=other_auth
    ).get_json()
    assert page["items"] == []
    assert client.get(f"/v1/layang/transmissions/{tid}", headers=auth).status_code == 200


def test_from_without_a_name_has_no_name_key(client, auth):
    body = {
        "from": {"email": "plain@sender.test"},
        "subject": "Hello",
        "to": [{"email": "a@rcpt.test"}],
        "bodyText": "hi",
    }
    response = client.post("/v1/layang/transmissions", json=body, headers=auth)
    tid = response.get_json()["transmissionId"]
    (record,) = client.get("/v1/layang/activity", headers=auth).get_json()["items"]
    assert record["from"] == {"email": "plain@sender.test"}
    view = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).get_json()
    assert view["from"] == {"email": "plain@sender.test"}
    assert view["recipients"][0]["from"] == {"email": "plain@sender.test"}


def test_metadata_keeps_any_json_values(client, auth):
    tid = send(client, auth, ["a@rcpt.test"])
    stored = {"order": 42, "vip": True, "tags": ["a", "b"], "user": {"id": None}}
    # Written as intake will store it once the API accepts any JSON values.
    Transmission.update(metadata=json.dumps(stored)).where(Transmission.id == tid).execute()
    (record,) = client.get("/v1/layang/activity", headers=auth).get_json()["items"]
    assert record["metadata"] == stored
