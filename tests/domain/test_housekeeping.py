"""What the worker clears away: webhook deliveries past their retention, never pending ones."""

from __future__ import annotations

from layang.clock import now_ms
from layang.db import id_floor, new_id
from layang.domain import housekeeping
from layang.models import (
    WEBHOOK_DELIVERED,
    WEBHOOK_FAILED,
    WEBHOOK_PENDING,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)

DAY_MS = 86_400_000


def _delivery(endpoint: WebhookEndpoint, made_at: int, status: str) -> str:
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


def test_settled_webhook_deliveries_go_after_their_retention_with_attempts_and_events(account):
    endpoint = WebhookEndpoint.create(
        account=account, url="https://hooks.example.com/", events="*", secret=b"x"
    )
    now = now_ms()
    old = now - (housekeeping.WEBHOOK_RETENTION_DAYS + 1) * DAY_MS
    recent = now - (housekeeping.WEBHOOK_RETENTION_DAYS - 1) * DAY_MS
    gone = {_delivery(endpoint, old, WEBHOOK_DELIVERED), _delivery(endpoint, old, WEBHOOK_FAILED)}
    kept = {
        _delivery(endpoint, old, WEBHOOK_PENDING),
        _delivery(endpoint, recent, WEBHOOK_DELIVERED),
        _delivery(endpoint, now, WEBHOOK_FAILED),
    }

    assert housekeeping.delete_expired(now) == 2

    remaining = {d.id for d in WebhookDelivery.select()}
    assert remaining == kept and not remaining & gone
    assert {a.delivery_id for a in WebhookAttempt.select()} == kept
    assert {e.delivery_id for e in WebhookEvent.select()} == kept
    assert housekeeping.delete_expired(now) == 0


def test_an_id_floor_sorts_between_the_ids_made_before_and_at_its_time():
    made = new_id()
    assert id_floor(now_ms() - 1) < made < id_floor(now_ms() + 1000)


def test_breaker_counters_older_than_their_window_go(app, account):
    from layang.mail.reputation import BUCKET_MS, WINDOW_MS, bucket_of
    from layang.models import BreakerCount

    now = now_ms()
    for bucket in (bucket_of(now), bucket_of(now - WINDOW_MS - BUCKET_MS)):
        BreakerCount.create(account=account.id, domain="", bucket=bucket, sent=1)
    housekeeping.delete_expired(now)
    assert [row.bucket for row in BreakerCount.select()] == [bucket_of(now)]
