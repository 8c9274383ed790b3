"""Migration 26: each account's retention settings, and when a message's content expired."""

from __future__ import annotations

from layang.migrations.dialect import SQLITE, Dialect

NAME = "each account's retention settings, and when a message's content expired"


def statements(t: Dialect) -> list[str]:
    # Null days: the service's settings (LAYANG_RETENTION_DAYS, LAYANG_CONTENT_RETENTION_DAYS).
    # The partial index holds only the messages whose content is still kept, so finding those
    # due to expire reads the few that are, never the weeks of history already expired.
    boolean = "INTEGER" if t is SQLITE else "BOOLEAN"
    return [
        'ALTER TABLE "account" ADD COLUMN "retention_days" INTEGER',
        'ALTER TABLE "account" ADD COLUMN "content_days" INTEGER',
        f'ALTER TABLE "account" ADD COLUMN "store_content" {boolean} NOT NULL DEFAULT TRUE',
        f'ALTER TABLE "transmission" ADD COLUMN "content_expired_at" {t.bigint}',
        'CREATE INDEX "transmission_content_kept" ON "transmission" ("account_id", "id") '
        'WHERE "content_expired_at" IS NULL',
    ]
