"""Migration 5: idempotency keys, rate limits, key scopes."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "idempotency keys, rate limits, key scopes"


def statements(t: Dialect) -> list[str]:
    return [
        """ALTER TABLE "api_key" ADD COLUMN "scope" VARCHAR(8) NOT NULL DEFAULT 'full'""",
        f"""CREATE TABLE "idempotency_key" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "key" VARCHAR(255) NOT NULL,
            "fingerprint" VARCHAR(64) NOT NULL,
            "token" VARCHAR(32) NOT NULL,
            "claimed_at" {t.bigint} NOT NULL,
            "expires_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "idempotency_key_account_id_key" '
        'ON "idempotency_key" ("account_id", "key")',
        'CREATE INDEX "idempotency_key_expires_at" ON "idempotency_key" ("expires_at")',
        f"""CREATE TABLE "idempotency_answer" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "key" VARCHAR(255) NOT NULL,
            "fingerprint" VARCHAR(64) NOT NULL,
            "status" INTEGER NOT NULL,
            "body" TEXT NOT NULL,
            "expires_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "idempotency_answer_account_id_key" '
        'ON "idempotency_answer" ("account_id", "key")',
        'CREATE INDEX "idempotency_answer_expires_at" ON "idempotency_answer" ("expires_at")',
        f"""CREATE TABLE "rate_window" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "starts_at" {t.bigint} NOT NULL,
            "ends_at" {t.bigint} NOT NULL,
            "count" INTEGER NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "rate_window_account_id_starts_at" '
        'ON "rate_window" ("account_id", "starts_at")',
        'CREATE INDEX "rate_window_ends_at" ON "rate_window" ("ends_at")',
    ]
