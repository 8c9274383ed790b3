"""Migration 14: streams and the circuit breaker."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "streams and the circuit breaker"


def statements(t: Dialect) -> list[str]:
    return [
        """ALTER TABLE "transmission" ADD COLUMN "stream" VARCHAR(16) NOT NULL """
        """DEFAULT 'transactional'""",
        """ALTER TABLE "transmission" ADD COLUMN "from_domain" VARCHAR(253) NOT NULL DEFAULT ''""",
        'ALTER TABLE "recipient" ADD COLUMN "priority" INTEGER NOT NULL DEFAULT 0',
        'CREATE INDEX "recipient_priority_next_attempt_at" '
        'ON "recipient" ("priority", "next_attempt_at")',
        f"""CREATE TABLE "breaker_count" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "bucket" {t.bigint} NOT NULL,
            "sent" INTEGER NOT NULL,
            "hard_bounces" INTEGER NOT NULL,
            "complaints" INTEGER NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "breaker_count_account_id_domain_bucket" '
        'ON "breaker_count" ("account_id", "domain", "bucket")',
        f"""CREATE TABLE "breaker_state" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "level" INTEGER NOT NULL,
            "reason" TEXT NOT NULL,
            "changed_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "breaker_state_account_id_domain" '
        'ON "breaker_state" ("account_id", "domain")',
    ]
