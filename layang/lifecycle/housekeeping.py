"""What the worker clears away besides sending: idempotency keys past their 24 hours, rate
limit windows that have closed, console sessions past their 12 hours (and people's one-time
links and sign-in counters past theirs), audit entries older than 400 days, circuit breaker
counters older than their 24 hours. A few indexed DELETEs every few minutes, never per message.
What ages out of the history (records, events, content, webhook deliveries) is
``layang.lifecycle.retention``'s.
"""

from __future__ import annotations

from layang.clock import now_ms
from layang.db import write_transaction
from layang.mail.reputation import WINDOW_MS, bucket_of
from layang.models import BreakerCount, IdempotencyAnswer, IdempotencyKey, RateWindow
from layang.team import audit, key_sessions, links, passwords, sessions

INTERVAL_SECONDS = 300.0


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
    deleted += key_sessions.delete_expired(now)
    deleted += sessions.delete_expired(now)
    deleted += links.delete_expired(now)
    deleted += passwords.delete_expired(now)
    with write_transaction(durable=False):
        deleted += audit.expire(now - audit.KEEP_MS)
    return deleted
