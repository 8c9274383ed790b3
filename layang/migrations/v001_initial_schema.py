"""Migration 1: initial schema."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "initial schema"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "account" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "name" VARCHAR(64) NOT NULL,
            "mode" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL)""",
        'CREATE UNIQUE INDEX "account_name" ON "account" ("name")',
        f"""CREATE TABLE "api_key" (
            "id" VARCHAR(32) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "label" VARCHAR(200) NOT NULL,
            "prefix" VARCHAR(16) NOT NULL,
            "secret_hash" VARCHAR(64) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "revoked_at" {t.bigint},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "api_key_account_id" ON "api_key" ("account_id")',
        'CREATE UNIQUE INDEX "api_key_secret_hash" ON "api_key" ("secret_hash")',
        f"""CREATE TABLE "transmission" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "source" VARCHAR(8) NOT NULL,
            "mail_from" VARCHAR(320) NOT NULL,
            "from_header" TEXT NOT NULL,
            "subject" TEXT NOT NULL,
            "message_id" VARCHAR(400) NOT NULL,
            "metadata" TEXT NOT NULL,
            "payload" TEXT,
            "raw" {t.blob},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "transmission_account_id" ON "transmission" ("account_id")',
        f"""CREATE TABLE "recipient" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "transmission_id" VARCHAR(26) NOT NULL,
            "account_id" INTEGER NOT NULL,
            "address" VARCHAR(320) NOT NULL,
            "recipient_type" VARCHAR(3) NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "updated_at" {t.bigint} NOT NULL,
            "attempts" INTEGER NOT NULL,
            "next_attempt_at" {t.bigint},
            "lease_owner" VARCHAR(64),
            "lease_expires_at" {t.bigint},
            FOREIGN KEY ("transmission_id") REFERENCES "transmission" ("id") ON DELETE CASCADE,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "recipient_transmission_id" ON "recipient" ("transmission_id")',
        'CREATE INDEX "recipient_next_attempt_at" ON "recipient" ("next_attempt_at")',
        'CREATE INDEX "recipient_account_id_id" ON "recipient" ("account_id", "id")',
        'CREATE INDEX "recipient_account_id_status_id" '
        'ON "recipient" ("account_id", "status", "id")',
        f"""CREATE TABLE "event" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "recipient_id" VARCHAR(26) NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "detail" TEXT NOT NULL,
            FOREIGN KEY ("recipient_id") REFERENCES "recipient" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "event_recipient_id" ON "event" ("recipient_id")',
    ]
