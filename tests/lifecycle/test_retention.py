"""Retention: records, events, content and webhook history go when their time is up (clock moved
forward), per account, never queued mail; the API, the console and the CLI say so."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from layang.clock import now_ms
from layang.domain import accounts
from layang.ids import id_floor, new_id
from layang.lifecycle import retention
from layang.models import (
    WEBHOOK_DELIVERED,
    WEBHOOK_FAILED,
    WEBHOOK_PENDING,
    AuditEntry,
    Event,
    PayloadChunk,
    Recipient,
    Transmission,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from tests.conftest import BACKENDS, drain
from tests.web.test_console import _login

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

DAY_MS = 86_400_000


def send(client, auth, to, subject="Hello"):
    body = {
        "from": {"email": "shop@sender.test"},
        "subject": subject,
        "to": [{"email": a} for a in to],
        "bodyText": "Reset your password: https://shop.test/reset/secret-token",
    }
    response = client.post("/v1/layang/transmissions", json=body, headers=auth)
    assert response.status_code == 200, response.get_json()
    return response.get_json()["transmissionId"]


def activity(client, auth):
    page = client.get("/v1/layang/activity", query_string={"limit": 100}, headers=auth)
    assert page.status_code == 200
    return {r["recipient"]: r for r in page.get_json()["items"]}


def test_content_expires_after_delivery_records_after_retention_queued_mail_never(
    client, auth, api_key, config, upstream, relay_to
):
    upstream.script_rcpt("later@rcpt.test", "451 4.7.1 try again later")
    delivered = send(client, auth, ["ana@rcpt.test"])
    mixed = send(client, auth, ["bo@rcpt.test", "later@rcpt.test"])
    drain(relay_to(upstream, retry_base_seconds=3600))
    start = now_ms()

    # Six days on, everything is still there.
    assert retention.apply(config, start + 6 * DAY_MS).as_json() == {
        "records": 0,
        "events": 0,
        "messages": 0,
        "contents": 0,
        "webhookDeliveries": 0,
    }
    assert activity(client, auth)["ana@rcpt.test"]["content"] == "stored"

    # Eight days on, the delivered message's content has gone; the one still queued for one
    # recipient keeps it.
    removed = retention.apply(config, start + 8 * DAY_MS)
    assert removed.contents == 1 and removed.records == 0
    records = activity(client, auth)
    assert records["ana@rcpt.test"]["content"] == "expired"
    assert records["ana@rcpt.test"]["status"] == "Delivery"
    assert [e["status"] for e in records["ana@rcpt.test"]["events"]] == ["Injection", "Delivery"]
    assert records["bo@rcpt.test"]["content"] == "stored"
    stored = Transmission.get_by_id(delivered)
    assert stored.payload is None and stored.raw is None
    assert Transmission.get_by_id(mixed).payload is not None
    view = client.get(f"/v1/layang/transmissions/{delivered}", headers=auth).get_json()
    assert view["recipients"][0]["content"] == "expired"

    # The console says so where the message was.
    _login(client, api_key)
    page = client.get(f"/console/activity/{records['ana@rcpt.test']['id']}")
    assert page.status_code == 200
    text = page.get_data(as_text=True)
    assert "content has expired" in text
    assert "secret-token" not in text
    assert "ana@rcpt.test" in text  # the record stays

    # A hundred days on, the delivered mail's records are gone, the queued one's are not.
    removed = retention.apply(config, start + 100 * DAY_MS)
    assert removed.records == 2  # ana, and bo (final) — later is still queued
    assert removed.messages == 1  # the mixed message keeps its queued recipient
    assert set(activity(client, auth)) == {"later@rcpt.test"}
    assert Transmission.get_or_none(Transmission.id == delivered) is None
    assert Transmission.get_by_id(mixed).payload is not None
    assert Event.select().join(Recipient).where(Recipient.address == "ana@rcpt.test").count() == 0


def test_each_account_keeps_its_own_settings(client, auth, config, upstream, relay_to):
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    assert client.get("/v1/layang/account", headers=auth).get_json() == {
        "name": "acme",
        "mode": "live",
        "retentionDays": 45,
        "contentDays": 7,
        "storeContent": True,
    }
    answer = client.patch(
        "/v1/layang/account", json={"retentionDays": 2, "contentDays": 1}, headers=auth
    )
    assert answer.status_code == 200
    assert answer.get_json()["retentionDays"] == 2 and answer.get_json()["contentDays"] == 1
    assert client.get("/v1/layang/account", headers=other_auth).get_json()["retentionDays"] == 45
    send(client, auth, ["ana@rcpt.test"])
    send(client, other_auth, ["ana@rcpt.test"])
    drain(relay_to(upstream))
    start = now_ms()

    retention.apply(config, start + int(1.5 * DAY_MS))
    assert activity(client, auth)["ana@rcpt.test"]["content"] == "expired"
    assert activity(client, other_auth)["ana@rcpt.test"]["content"] == "stored"
    retention.apply(config, start + 3 * DAY_MS)
    assert activity(client, auth) == {}
    assert set(activity(client, other_auth)) == {"ana@rcpt.test"}

    # null returns to the service's settings; the change is in the audit log.
    answer = client.patch("/v1/layang/account", json={"retentionDays": None}, headers=auth)
    assert answer.get_json()["retentionDays"] == 45
    assert answer.get_json()["contentDays"] == 1
    actions = [e.action for e in AuditEntry.select().order_by(AuditEntry.id)]
    assert actions == ["account.retention_changed", "account.retention_changed"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"retentionDays": 0}, "retentionDays"),
        ({"retentionDays": "45"}, "retentionDays"),
        ({"contentDays": -1}, "contentDays"),
        ({"contentDays": 100000}, "contentDays"),
        ({"storeContent": "no"}, "storeContent"),
        ({"keepForever": True}, "keepForever"),
    ],
)
def test_bad_settings_are_refused_naming_the_field(client, auth, body, field):
    answer = client.patch("/v1/layang/account", json=body, headers=auth)
    assert answer.status_code == 400
    assert field in json.dumps(answer.get_json())
    assert client.get("/v1/layang/account", headers=auth).get_json()["retentionDays"] == 45


def test_without_stored_content_it_goes_once_every_recipient_is_final(
    client, auth, config, upstream, relay_to
):
    answer = client.patch("/v1/layang/account", json={"storeContent": False}, headers=auth)
    assert answer.get_json() == {
        "name": "acme",
        "mode": "live",
        "retentionDays": 45,
        "contentDays": 7,
        "storeContent": False,
    }
    upstream.script_rcpt("later@rcpt.test", "451 4.7.1 try again later")
    done = send(client, auth, ["ana@rcpt.test"])
    waiting = send(client, auth, ["later@rcpt.test"])
    drain(relay_to(upstream, retry_base_seconds=3600))
    removed = retention.apply(config)
    assert removed.contents == 1
    assert Transmission.get_by_id(done).content_expired_at is not None
    assert Transmission.get_by_id(waiting).payload is not None
    assert activity(client, auth)["later@rcpt.test"]["content"] == "stored"


def test_sqlite_and_postgresql_remove_in_bounded_batches(client, auth, config, monkeypatch):
    monkeypatch.setattr(retention, "BATCH", 3)
    tids = [send(client, auth, [f"r{n}@rcpt.test"]) for n in range(8)]
    # Mark them delivered, as a worker would, without sending eight emails.
    Recipient.update(status="Delivery", next_attempt_at=None).execute()
    far = now_ms() + 50 * DAY_MS
    shown = retention.show(config, far)
    assert shown.records == 8 and shown.messages == 8 and shown.contents == 8
    assert Recipient.select().count() == 8  # show removes nothing
    removed = retention.apply(config, far)
    assert removed.as_json() == {**shown.as_json()}
    assert Recipient.select().count() == 0
    assert Transmission.select().where(Transmission.id.in_(tids)).count() == 0
    assert PayloadChunk.select().count() == 0


def test_settled_webhook_history_goes_with_the_retention_pending_never(account, config, backend):
    endpoint = WebhookEndpoint.create(
        account=account, url="https://hooks.example.com/", events="*", secret=b"x"
    )
    now = now_ms()
    # PostgreSQL removes history a week at a time (weekly partitions): up to 7 days later.
    old = now - (46 if backend == "sqlite" else 45 + 8) * DAY_MS
    recent = now - 44 * DAY_MS
    gone = {_delivery(endpoint, old, WEBHOOK_DELIVERED), _delivery(endpoint, old, WEBHOOK_FAILED)}
    kept = {
        _delivery(endpoint, old, WEBHOOK_PENDING),
        _delivery(endpoint, recent, WEBHOOK_DELIVERED),
        _delivery(endpoint, now, WEBHOOK_FAILED),
    }
    assert retention.show(config, now).webhook_deliveries == 2
    assert retention.apply(config, now).webhook_deliveries == 2
    assert {d.id for d in WebhookDelivery.select()} == kept
    assert not WebhookAttempt.select().where(WebhookAttempt.delivery.in_(list(gone))).exists()
    assert not WebhookEvent.select().where(WebhookEvent.delivery_id.in_(list(gone))).exists()
    assert WebhookAttempt.select().count() == WebhookEvent.select().count() == 3


def _delivery(endpoint, made_at, status):
    delivery_id = id_floor(made_at)[:16] + new_id()[16:]
    WebhookDelivery.create(
        id=delivery_id,
        endpoint=endpoint,
        event_ids="[]",
        body="{}",
        status=status,
        attempts=1,
        created_at=made_at,
    )
    WebhookAttempt.create(
        delivery=delivery_id, endpoint=endpoint, attempted_at=made_at, status=status
    )
    WebhookEvent.create(
        event_id=new_id(),
        endpoint=endpoint,
        status="Delivery",
        created_at=made_at,
        delivery_id=delivery_id,
    )
    return delivery_id


def layang(config, *args):
    env = {
        "PATH": "/usr/bin:/bin",
        "LAYANG_DATA_DIR": str(config.data_dir),
        "LAYANG_DATABASE_URL": config.database_url,
        "LAYANG_SECRET_KEY": config.secret_key,
    }
    done = subprocess.run(
        [sys.executable, "-m", "layang", *args], env=env, capture_output=True, text=True, timeout=60
    )
    return done.returncode, done.stdout, done.stderr


def test_the_cli_sets_shows_and_runs_retention(client, auth, config, upstream, relay_to):
    send(client, auth, ["ana@rcpt.test"])
    drain(relay_to(upstream))
    code, out, err = layang(config, "accounts", "set", "acme", "--content-days", "0")
    assert code == 0, err
    assert json.loads(out) == {
        "name": "acme",
        "mode": "live",
        "retentionDays": 45,
        "contentDays": 0,
        "storeContent": True,
    }
    later = "2099-01-01"
    code, out, err = layang(config, "retention", "show", "--as-of", later)
    assert code == 0, err
    assert json.loads(out) == {
        "asOf": "2099-01-01T00:00:00.000Z",
        "retentionDays": 45,
        "contentRetentionDays": 7,
        "records": 1,
        "events": 1,
        "messages": 1,
        "contents": 1,
        "webhookDeliveries": 0,
    }
    code, out, err = layang(config, "retention", "run")
    assert code == 0, err
    assert json.loads(out)["contents"] == 1 and json.loads(out)["records"] == 0
    assert activity(client, auth)["ana@rcpt.test"]["content"] == "expired"
    code, out, err = layang(config, "retention", "run", "--as-of", later)
    assert code == 0, err
    assert {k: v for k, v in json.loads(out).items() if k != "asOf"} == {
        "records": 1,
        "events": 1,
        "messages": 1,
        "contents": 0,
        "webhookDeliveries": 0,
    }
    assert activity(client, auth) == {}
    code, _, err = layang(config, "retention", "run", "--as-of", "soon")
    assert code == 2 and "ISO 8601" in err
    code, _, err = layang(config, "accounts", "set", "nobody", "--retention-days", "3")
    assert code == 1 and "nobody" in err


def test_the_worker_applies_retention_by_itself(client, auth, config, upstream, relay_to, tmp_path):
    from tests.delivery.test_crash import process_env, start, stop, wait_while_running

    tid = send(client, auth, ["ana@rcpt.test"])
    drain(relay_to(upstream))
    client.patch("/v1/layang/account", json={"storeContent": False}, headers=auth)
    log = tmp_path / "worker.log"
    worker = start(["worker"], process_env(config, LAYANG_RELAY_URL=upstream.url), log)
    try:
        wait_while_running(
            lambda: Transmission.get_by_id(tid).content_expired_at is not None,
            worker,
            log,
            "the worker did not expire the content",
        )
    finally:
        stop(worker)
    assert activity(client, auth)["ana@rcpt.test"]["content"] == "expired"


def test_links_in_mail_older_than_its_records_still_lead_to_their_address(
    client, auth, config, upstream, relay_to
):
    from tests.mail.test_tracking import html_of, links, path_of
    from tests.mail.test_tracking import send as send_tracked

    send_tracked(client, auth, ["ana@rcpt.test"], clickTracking=True)
    drain(relay_to(upstream))
    click = next(u for u in links(html_of(upstream.received[0])) if "/t/c/" in u)
    assert client.get(path_of(click)).status_code == 302
    retention.apply(config, now_ms() + 50 * DAY_MS)
    assert activity(client, auth) == {}

    later = client.get(path_of(click))
    assert later.status_code == 200 and "Location" not in later.headers
    assert 'href="https://shop.test/orders/42?a=1&amp;b=2"' in later.get_data(as_text=True)
    assert Event.select().count() == 0
