"""Migration 33: scheduled sends.

A send with ``scheduledAt`` (CONTRACT section 23) keeps the time on its transmission, and each
recipient waits ``Scheduled`` with ``scheduled_at`` set and no ``next_attempt_at``: outside the
queue the workers claim from, however many wait. The workers release what is due by the index
on ``scheduled_at`` (a range read of the due rows only), which is cleared on release or cancel.
"""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "scheduled sends"


def statements(t: Dialect) -> list[str]:
    return [
        f'ALTER TABLE "transmission" ADD COLUMN "scheduled_at" {t.bigint}',
        f'ALTER TABLE "recipient" ADD COLUMN "scheduled_at" {t.bigint}',
        'CREATE INDEX "recipient_scheduled_at" ON "recipient" ("scheduled_at")',
    ]
