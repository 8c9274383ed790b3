"""What the worker clears away besides sending: idempotency keys past their 24 hours and rate
limit windows that have closed. A few indexed DELETEs every few minutes, never per message."""

from __future__ import annotations

from layang.clock import now_ms
from layang.db import write_transaction
from layang.models import IdempotencyAnswer, IdempotencyKey, RateWindow

INTERVAL_SECONDS = 300.0


def delete_expired(now: int | None = None) -> int:
    """Delete expired idempotency keys with their answers and closed rate-limit windows;
    returns how many rows went. Safe to run from any number of workers at once."""
    now = now_ms() if now is None else now
    with write_transaction(durable=False):
        deleted = IdempotencyAnswer.delete().where(IdempotencyAnswer.expires_at <= now).execute()
        deleted += IdempotencyKey.delete().where(IdempotencyKey.expires_at <= now).execute()
        deleted += RateWindow.delete().where(RateWindow.ends_at <= now).execute()
    return deleted
