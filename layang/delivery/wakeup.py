"""Waking an idle worker when mail is queued: every enqueue sends ``NOTIFY layang_mail`` on
PostgreSQL (see :mod:`layang.queueing.wakeup`), and the worker also wakes when the next retry
falls due or scheduled mail's time comes (``layang.mail.schedule``)."""

from __future__ import annotations

from layang.config import Config
from layang.db import database
from layang.mail.outbox import QUEUED_CHANNEL
from layang.queueing.wakeup import Wakeup


def next_due_ms() -> int | None:
    """When the next queued email falls due or the next scheduled one is to be released
    (epoch ms), or None if none is queued or scheduled. Each minimum is read from its index."""
    row = database.execute_sql(
        'SELECT (SELECT MIN("next_attempt_at") FROM "recipient" '
        'WHERE "next_attempt_at" IS NOT NULL), '
        '(SELECT MIN("scheduled_at") FROM "recipient" WHERE "scheduled_at" IS NOT NULL)'
    ).fetchone()
    times = [int(value) for value in row or () if value is not None]
    return min(times) if times else None


def mail_wakeup(config: Config) -> Wakeup:
    """The worker's wait for mail to send."""
    return Wakeup(config, QUEUED_CHANNEL, next_due_ms)
