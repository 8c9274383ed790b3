"""Scheduled sends (CONTRACT section 23): held in the database until their time, then put in
the queue, or cancelled or moved before it.

A scheduled recipient waits ``Scheduled`` with ``scheduled_at`` set and no ``next_attempt_at``
(``layang.mail.outbox.enqueue``), so the queue the workers claim from never holds it. Every
worker, before it claims, releases what is due (``release_due``): a read of the index on
``scheduled_at`` finds it, and one transaction makes each such recipient ``Injection``, due at
once, with its Injection event (webhooks and the overview's counts see it then). Nothing is
held in memory: a restart loses nothing, and whichever worker looks first releases it.

Cancelling and moving: ``layang.domain.scheduled_sends``.
"""

from __future__ import annotations

import json

from layang.clock import now_ms
from layang.db import database, is_postgresql, write_transaction
from layang.mail.events import append_events
from layang.mail.outbox import QUEUED_CHANNEL
from layang.models import INJECTION, SCHEDULED

RELEASE_LIMIT = 1000
"""Recipients released in one transaction at most; a worker releases again before each claim."""


def release_due(until: int | None = None, limit: int = RELEASE_LIMIT) -> int:
    """Put the scheduled recipients due by ``until`` (epoch ms; default now) in the queue, due
    now, with their Injection events; returns how many. A read of the ``scheduled_at`` index
    comes first, so that a worker with nothing to release takes no write lock."""
    now = now_ms()
    until = now if until is None else until
    param = database.obj.param
    due = database.execute_sql(
        f'SELECT 1 FROM "recipient" WHERE "scheduled_at" <= {param} LIMIT 1', (until,)
    ).fetchone()
    if due is None:
        return 0
    chosen = (
        f'SELECT "id" FROM "recipient" WHERE "scheduled_at" <= {param} '
        f'ORDER BY "scheduled_at" LIMIT {param}'
    )
    which = (
        f"= ANY(ARRAY({chosen} FOR UPDATE SKIP LOCKED))" if is_postgresql() else f"IN ({chosen})"
    )
    with write_transaction():
        rows = database.execute_sql(
            f'UPDATE "recipient" SET "status" = {param}, "scheduled_at" = NULL, '
            f'"next_attempt_at" = {param}, "updated_at" = {param} '
            f'WHERE "id" {which} AND "status" = {param} RETURNING "id"',
            (INJECTION, now, now, until, limit, SCHEDULED),
        ).fetchall()
        detail = json.dumps({"scheduled": True})
        append_events([(row[0], INJECTION, now, detail) for row in rows])
    if rows and is_postgresql():
        database.execute_sql(f"NOTIFY {QUEUED_CHANNEL}")
    return len(rows)
