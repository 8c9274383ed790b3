"""Waking an idle worker when mail is queued: every enqueue sends ``NOTIFY layang_mail`` on
PostgreSQL (see :mod:`layang.queueing.wakeup`), and the worker also wakes when the next retry
falls due."""

from __future__ import annotations

from layang.config import Config
from layang.db import database
from layang.mail.outbox import QUEUED_CHANNEL
from layang.queueing.wakeup import Wakeup


def next_due_ms() -> int | None:
    """When the next queued email falls due (epoch ms), or None if none is queued."""
    row = database.execute_sql(
        'SELECT MIN("next_attempt_at") FROM "recipient" WHERE "next_attempt_at" IS NOT NULL'
    ).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def mail_wakeup(config: Config) -> Wakeup:
    """The worker's wait for mail to send."""
    return Wakeup(config, QUEUED_CHANNEL, next_due_ms)
