"""Migration 2: sandbox authorized recipients."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "sandbox authorized recipients"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "authorized_recipient" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "email" VARCHAR(320) NOT NULL,
            "email_key" VARCHAR(320) NOT NULL,
            "name" VARCHAR(256),
            "status" VARCHAR(16) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "verified_at" {t.bigint},
            "token_hash" VARCHAR(64),
            "token_expires_at" {t.bigint},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "authorized_recipient_account_id" ON "authorized_recipient" ("account_id")',
        'CREATE UNIQUE INDEX "authorized_recipient_token_hash" '
        'ON "authorized_recipient" ("token_hash")',
        'CREATE UNIQUE INDEX "authorized_recipient_account_id_email_key" '
        'ON "authorized_recipient" ("account_id", "email_key")',
    ]
