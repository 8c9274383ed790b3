"""Migration 33: scheduled sends, and tracking (link) domains.

A send with ``scheduledAt`` (CONTRACT section 23) keeps the time on its transmission, and each
recipient waits ``Scheduled`` with ``scheduled_at`` set and no ``next_attempt_at``: outside the
queue the workers claim from, however many wait. The workers release what is due by the index
on ``scheduled_at`` (a range read of the due rows only), which is cleared on release or cancel.

A tracking domain (``links.shop.example``) is an account's own name for its tracked links and
pixel, CNAMEd to the service; once verified it is also a name the TLS proxy may get a
certificate for (``/internal/tls-allowed``), found by ``domain`` alone.
"""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "scheduled sends; tracking domains"


def statements(t: Dialect) -> list[str]:
    return [
        f'ALTER TABLE "transmission" ADD COLUMN "scheduled_at" {t.bigint}',
        f'ALTER TABLE "recipient" ADD COLUMN "scheduled_at" {t.bigint}',
        'CREATE INDEX "recipient_scheduled_at" ON "recipient" ("scheduled_at")',
        'CREATE TABLE "tracking_domain" ('
        f'"id" {t.autoincrement} NOT NULL PRIMARY KEY, '
        '"account_id" INTEGER NOT NULL REFERENCES "account" ("id") ON DELETE CASCADE, '
        '"domain" VARCHAR(253) NOT NULL, '
        '"status" VARCHAR(16) NOT NULL, '
        f'"created_at" {t.bigint} NOT NULL, '
        f'"checked_at" {t.bigint}, '
        '"found" TEXT)',
        'CREATE UNIQUE INDEX "tracking_domain_account_id_domain" '
        'ON "tracking_domain" ("account_id", "domain")',
        'CREATE INDEX "tracking_domain_domain_status" ON "tracking_domain" ("domain", "status")',
    ]
