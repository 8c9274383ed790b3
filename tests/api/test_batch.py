"""``POST /v1/layang/transmissions/batch`` (CONTRACT section 23), on SQLite and PostgreSQL:
each message answered alone and in order, the accepted ones stored and sent, one idempotency
key for the batch."""

from __future__ import annotations

import pytest

from layang.models import Recipient, Transmission
from tests.conftest import BACKENDS, drain

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
URL = "/v1/layang/transmissions/batch"


def message(to: str, **fields):
    return {"from": "shop@sender.test", "subject": f"To {to}", "bodyText": "Hi", "to": to, **fields}


def test_each_message_is_answered_alone_in_order(client, auth, upstream, relay_to):
    response = client.post(
        URL,
        headers=auth,
        json={
            "messages": [
                message("ana@rcpt.test", tags=["batch"]),
                message("not-an-address"),
                message("budi@rcpt.test", templateId="missing"),
                message("citra@rcpt.test", scheduledAt="2100-01-01T00:00:00Z"),
                {"subject": "no sender"},
                message("dewi@rcpt.test", metadata={"n": 5}),
            ]
        },
    )
    assert response.status_code == 200, response.json
    results = response.json["results"]
    assert len(results) == 6
    assert set(results[0]) == {"transmissionId"}
    assert results[1]["status"] == 400 and "to" in results[1]["errors"]
    assert results[1]["message"].startswith("to.0.email:")
    assert results[2]["status"] == 404 and results[2]["error"] == "template_not_found"
    assert results[3]["status"] == 400 and list(results[3]["errors"]) == ["scheduledAt"]
    assert results[4]["status"] == 400 and "from" in results[4]["errors"]
    assert set(results[5]) == {"transmissionId"}
    stored = {t.id for t in Transmission.select()}
    assert stored == {results[0]["transmissionId"], results[5]["transmissionId"]}
    drain(relay_to(upstream))
    assert sorted(r.rcpt_tos[0] for r in upstream.received) == ["ana@rcpt.test", "dewi@rcpt.test"]
    record = client.get(f"/v1/layang/transmissions/{results[5]['transmissionId']}", headers=auth)
    assert record.json["recipients"][0]["metadata"] == {"n": 5}
    tagged = client.get("/v1/layang/activity?tag=batch", headers=auth).json["items"]
    assert [r["recipient"] for r in tagged] == ["ana@rcpt.test"]


def test_five_hundred_at_most_and_one_key_for_the_batch(client, auth):
    many = [message(f"r{n}@rcpt.test") for n in range(500)]
    keyed = {**auth, "Idempotency-Key": "batch-1"}
    first = client.post(URL, headers=keyed, json={"messages": many})
    assert first.status_code == 200
    ids = [r["transmissionId"] for r in first.json["results"]]
    assert len(set(ids)) == 500
    assert Recipient.select().count() == 500
    again = client.post(URL, headers=keyed, json={"messages": many})
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.json == first.json
    assert Recipient.select().count() == 500
    too_many = client.post(URL, headers=auth, json={"messages": [*many, message("x@rcpt.test")]})
    assert too_many.status_code == 400 and list(too_many.json["errors"]) == ["messages"]
    empty = client.post(URL, headers=auth, json={"messages": []})
    assert empty.status_code == 400
    assert Recipient.select().count() == 500


def test_suppressed_recipients_are_named_per_message(client, auth):
    listed = client.put("/v1/layang/suppressions/gone@rcpt.test", headers=auth, json={})
    assert listed.status_code in (200, 201), listed.json
    response = client.post(
        URL,
        headers=auth,
        json={
            "messages": [message(["ana@rcpt.test", "gone@rcpt.test"]), message("Gone@rcpt.test")]
        },
    )
    first, second = response.json["results"]
    assert first["suppressed"] == ["gone@rcpt.test"] and second["suppressed"] == ["Gone@rcpt.test"]
    statuses = sorted((r.address, r.status) for r in Recipient.select())
    assert statuses == [
        ("Gone@rcpt.test", "Suppressed"),
        ("ana@rcpt.test", "Injection"),
        ("gone@rcpt.test", "Suppressed"),
    ]
