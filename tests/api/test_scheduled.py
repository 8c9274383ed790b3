"""Scheduled sends (CONTRACT section 23) through the API, on SQLite and PostgreSQL: held
``Scheduled`` in the database until their time, cancelled or moved before it, counted as sent
when released."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from layang.clock import now_ms
from layang.domain import accounts, overview
from layang.mail.schedule import release_due
from tests.conftest import BACKENDS, drain

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def at(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()


def send(client, auth, scheduled_at, to=("ana@rcpt.test", "budi@rcpt.test"), **fields):
    body = {
        "from": "shop@sender.test",
        "subject": "Later",
        "bodyText": "Hi",
        "to": list(to),
        "scheduledAt": scheduled_at,
        **fields,
    }
    return client.post("/v1/layang/transmissions", headers=auth, json=body)


def statuses(client, auth, tid):
    view = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).json
    return [r["status"] for r in view["recipients"]]


def test_held_until_moved_then_sent(client, auth, account, upstream, relay_to):
    response = send(client, auth, at(3600), tags=["later"])
    assert response.status_code == 200, response.json
    tid = response.json["transmissionId"]
    view = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).json
    assert view["scheduledAt"].endswith("Z")
    assert [r["status"] for r in view["recipients"]] == ["Scheduled", "Scheduled"]
    assert view["recipients"][0]["events"][0]["status"] == "Scheduled"
    listed = client.get("/v1/layang/activity?status=Scheduled", headers=auth).json["items"]
    assert len(listed) == 2
    drain(relay_to(upstream))
    assert upstream.received == []
    day = overview.activity(account, overview.PERIODS["24h"])
    assert {s.key: s.total for s in day.chart.series}["sent"] == 0

    moved = client.patch(
        f"/v1/layang/transmissions/{tid}", headers=auth, json={"scheduledAt": at(-5)}
    )
    assert moved.status_code == 200, moved.json
    assert moved.json["transmissionId"] == tid
    drain(relay_to(upstream))
    assert sorted(r.rcpt_tos[0] for r in upstream.received) == ["ana@rcpt.test", "budi@rcpt.test"]
    record = client.get(f"/v1/layang/transmissions/{tid}", headers=auth).json["recipients"][0]
    assert [e["status"] for e in record["events"]] == ["Scheduled", "Injection", "Delivery"]
    day = overview.activity(account, overview.PERIODS["24h"])
    totals = {s.key: s.total for s in day.chart.series}
    assert (totals["sent"], totals["delivered"]) == (2, 2)
    assert [t.sent for t in overview.tag_figures(account, overview.PERIODS["24h"])] == [2]

    late = client.post(f"/v1/layang/transmissions/{tid}/cancel", headers=auth)
    assert late.status_code == 409 and late.json["error"] == "conflict"
    again = client.patch(
        f"/v1/layang/transmissions/{tid}", headers=auth, json={"scheduledAt": at(60)}
    )
    assert again.status_code == 409


def test_cancelled_before_its_time_is_never_sent(client, auth, upstream, relay_to):
    tid = send(client, auth, at(2)).json["transmissionId"]
    cancelled = client.post(f"/v1/layang/transmissions/{tid}/cancel", headers=auth)
    assert cancelled.status_code == 200, cancelled.json
    assert [r["status"] for r in cancelled.json["recipients"]] == ["Cancelled", "Cancelled"]
    assert cancelled.json["recipients"][0]["events"][-1]["status"] == "Cancelled"
    # Its time passes: nothing is released or sent.
    assert release_due(now_ms() + 10_000) == 0
    drain(relay_to(upstream))
    assert upstream.received == []
    repeat = client.post(f"/v1/layang/transmissions/{tid}/cancel", headers=auth)
    assert repeat.status_code == 200
    moved = client.patch(
        f"/v1/layang/transmissions/{tid}", headers=auth, json={"scheduledAt": at(60)}
    )
    assert moved.status_code == 409


def test_times_and_refusals(client, auth, upstream, relay_to, app):
    far = send(client, auth, at(31 * 86400))
    assert far.status_code == 400
    assert list(far.json["errors"]) == ["scheduledAt"]
    bad = send(client, auth, "tomorrow")
    assert bad.status_code == 400 and list(bad.json["errors"]) == ["scheduledAt"]
    past = send(client, auth, at(-3600), to=["ana@rcpt.test"])
    assert past.status_code == 200
    tid = past.json["transmissionId"]
    assert statuses(client, auth, tid) == ["Injection"]
    assert "scheduledAt" not in client.get(f"/v1/layang/transmissions/{tid}", headers=auth).json
    assert client.post(f"/v1/layang/transmissions/{tid}/cancel", headers=auth).status_code == 409
    assert client.post("/v1/layang/transmissions/nope/cancel", headers=auth).status_code == 404
    later = send(client, auth, at(29 * 86400)).json["transmissionId"]
    too_far = client.patch(
        f"/v1/layang/transmissions/{later}", headers=auth, json={"scheduledAt": at(40 * 86400)}
    )
    assert too_far.status_code == 400 and list(too_far.json["errors"]) == ["scheduledAt"]
    # Another account cannot see, cancel or move it.
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    assert (
        client.post(f"/v1/layang/transmissions/{later}/cancel", headers=other_auth).status_code
        == 404
    )
    assert statuses(client, auth, later) == ["Scheduled", "Scheduled"]
