"""What the worker clears away besides sending: idempotency keys past their 24 hours, rate
limit windows that have closed, console sessions past their 12 hours (and people's one-time
links and sign-in counters past theirs), audit entries older than 400 days, circuit breaker counters
older than their 24 hours, and webhook deliveries (with their attempts and events) settled
more than ``WEBHOOK_RETENTION_DAYS`` ago. A few indexed DELETEs every few minutes, never per
message."""

from __future__ import annotations

from layang.clock import now_ms
from layang.db import id_floor, write_transaction
from layang.domain import audit, console_sessions, people
from layang.mail.reputation import WINDOW_MS, bucket_of
from layang.models import (
    WEBHOOK_PENDING,
    BreakerCount,
    IdempotencyAnswer,
    IdempotencyKey,
    RateWindow,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEvent,
)

INTERVAL_SECONDS = 300.0
WEBHOOK_RETENTION_DAYS = 30
# Deliveries removed per run: keeps each write transaction short however much has piled up.
WEBHOOK_BATCH = 2000


def delete_expired(now: int | None = None) -> int:
    """Delete expired idempotency keys with their answers, closed rate-limit windows and the
    breaker's counters that left its window; returns how many rows went. Safe to run from any
    number of workers at once."""
    now = now_ms() if now is None else now
    with write_transaction(durable=False):
        deleted = IdempotencyAnswer.delete().where(IdempotencyAnswer.expires_at <= now).execute()
        deleted += IdempotencyKey.delete().where(IdempotencyKey.expires_at <= now).execute()
        deleted += RateWindow.delete().where(RateWindow.ends_at <= now).execute()
        deleted += (
            BreakerCount.delete().where(BreakerCount.bucket < bucket_of(now - WINDOW_MS)).execute()
        )
    deleted += delete_old_webhook_deliveries(now)
    deleted += console_sessions.delete_expired(now)
    deleted += people.delete_expired(now)
    with write_transaction(durable=False):
        deleted += audit.expire(now - audit.KEEP_MS)
    return deleted


def delete_old_webhook_deliveries(now: int) -> int:
    """Delete up to ``WEBHOOK_BATCH`` delivered or failed webhook deliveries made more than
    ``WEBHOOK_RETENTION_DAYS`` before ``now``, with their attempts and events; returns how many
    deliveries went. Pending ones stay whatever their age. Delivery ids are time-ordered, so
    "made before" is a range of the primary key."""
    cutoff = id_floor(now - WEBHOOK_RETENTION_DAYS * 86_400_000)
    with write_transaction(durable=False):
        ids = [
            row.id
            for row in WebhookDelivery.select(WebhookDelivery.id)
            .where((WebhookDelivery.id < cutoff) & (WebhookDelivery.status != WEBHOOK_PENDING))
            .order_by(WebhookDelivery.id)
            .limit(WEBHOOK_BATCH)
        ]
        if not ids:
            return 0
        WebhookAttempt.delete().where(WebhookAttempt.delivery.in_(ids)).execute()
        WebhookEvent.delete().where(WebhookEvent.delivery_id.in_(ids)).execute()
        return WebhookDelivery.delete().where(WebhookDelivery.id.in_(ids)).execute()
