"""Migration 8: webhooks."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "webhooks"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "webhook_endpoint" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "url" TEXT NOT NULL,
            "description" TEXT NOT NULL,
            "events" TEXT NOT NULL,
            "secret" {t.blob} NOT NULL,
            "previous_secret" {t.blob},
            "previous_secret_expires_at" {t.bigint},
            "created_at" {t.bigint} NOT NULL,
            "updated_at" {t.bigint} NOT NULL,
            "disabled_at" {t.bigint},
            "disabled_reason" TEXT,
            "failing_since" {t.bigint},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "webhook_endpoint_account_id" ON "webhook_endpoint" ("account_id")',
        f"""CREATE TABLE "webhook_event" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "event_id" VARCHAR(32) NOT NULL,
            "endpoint_id" VARCHAR(26) NOT NULL,
            "recipient_id" VARCHAR(26),
            "status" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "detail" TEXT NOT NULL,
            "delivery_id" VARCHAR(26),
            FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "webhook_event_delivery_id_id" ON "webhook_event" ("delivery_id", "id")',
        'CREATE INDEX "webhook_event_endpoint_id_recipient_id" '
        'ON "webhook_event" ("endpoint_id", "recipient_id")',
        f"""CREATE TABLE "webhook_delivery" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "endpoint_id" VARCHAR(26) NOT NULL,
            "event_ids" TEXT NOT NULL,
            "body" TEXT NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "attempts" INTEGER NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "next_attempt_at" {t.bigint},
            "lease_owner" VARCHAR(64),
            "lease_expires_at" {t.bigint},
            FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "webhook_delivery_endpoint_id" ON "webhook_delivery" ("endpoint_id")',
        'CREATE INDEX "webhook_delivery_next_attempt_at" ON "webhook_delivery" ("next_attempt_at")',
        f"""CREATE TABLE "webhook_attempt" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "delivery_id" VARCHAR(26) NOT NULL,
            "endpoint_id" VARCHAR(26) NOT NULL,
            "attempted_at" {t.bigint} NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "response_status" INTEGER,
            "error" TEXT,
            "next_attempt_at" {t.bigint},
            FOREIGN KEY ("delivery_id") REFERENCES "webhook_delivery" ("id") ON DELETE CASCADE,
            FOREIGN KEY ("endpoint_id") REFERENCES "webhook_endpoint" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "webhook_attempt_delivery_id" ON "webhook_attempt" ("delivery_id")',
        'CREATE INDEX "webhook_attempt_endpoint_id_id" ON "webhook_attempt" ("endpoint_id", "id")',
    ]
