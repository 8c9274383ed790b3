"""Rate limits (docs/api.md, "Idempotency, rate limits, key scopes"): at most N messages per account
in each fixed window.

A message is one submission (an API send or an SMTP DATA), whatever its number of recipients:
docs/api.md caps "the messages one account may submit", and one message to 50 recipients is
one request's work at intake. The count lives in the database, one row per account and window,
so every API process, SMTP server and host sharing the database counts together: one
``INSERT … ON CONFLICT DO UPDATE … RETURNING`` both counts and reads, atomically, on SQLite and
PostgreSQL alike. It commits without waiting for the disk: a count lost with the machine only
lets a few more messages through, once.

Fixed windows admit up to twice the limit across a window boundary (the end of one and the
start of the next); within any window the limit holds exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from layang.clock import now_ms
from layang.config import RateLimit
from layang.db import database, write_relaxed
from layang.domain.errors import RateLimited
from layang.models import Account

_COUNT_SQL = (
    'INSERT INTO "rate_window" ("account_id", "starts_at", "ends_at", "count") '
    "VALUES (?, ?, ?, 1) "
    'ON CONFLICT ("account_id", "starts_at") '
    'DO UPDATE SET "count" = "rate_window"."count" + 1 '
    'RETURNING "count"'
)
_READ_SQL = 'SELECT "count" FROM "rate_window" WHERE "account_id" = {p} AND "starts_at" = {p}'


@dataclass(frozen=True, slots=True)
class Quota:
    """Where an account stands in the current window: what the ``RateLimit-*`` headers say."""

    limit: int
    remaining: int
    reset_seconds: int


def _window(limit: RateLimit, now: int) -> tuple[int, int]:
    length = limit.seconds * 1000
    starts = now - now % length
    return starts, starts + length


def _seconds_until(ends: int, now: int) -> int:
    return max(1, math.ceil((ends - now) / 1000))


def take(account: Account, limit: RateLimit | None) -> Quota | None:
    """Count one message submitted by ``account``; returns the quota left after it, or None
    without a limit. Raises ``RateLimited`` (nothing counted beyond the limit matters: the
    window is full either way) when the window's ``limit`` is already used up."""
    if limit is None:
        return None
    now = now_ms()
    starts, ends = _window(limit, now)
    ((count,),), _ = write_relaxed(_COUNT_SQL, (account.id, starts, ends))
    if count > limit.count:
        raise RateLimited(str(limit), _seconds_until(ends, now))
    return Quota(limit.count, limit.count - count, _seconds_until(ends, now))


def quota(account: Account, limit: RateLimit | None) -> Quota | None:
    """Where ``account`` stands in the current window, counting nothing; None without a limit."""
    if limit is None:
        return None
    now = now_ms()
    starts, ends = _window(limit, now)
    cursor = database.execute_sql(_READ_SQL.format(p=database.obj.param), (account.id, starts))
    rows = cursor.fetchall()
    cursor.close()
    used = rows[0][0] if rows else 0
    return Quota(limit.count, max(0, limit.count - used), _seconds_until(ends, now))
