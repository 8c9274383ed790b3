"""Migration 4: sending domains and DKIM keys."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "sending domains and DKIM keys"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "sending_domain" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "return_path_domain" VARCHAR(253) NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "records" TEXT NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "checked_at" {t.bigint},
            "verified_at" {t.bigint},
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "sending_domain_account_id" ON "sending_domain" ("account_id")',
        'CREATE UNIQUE INDEX "sending_domain_domain" ON "sending_domain" ("domain")',
        f"""CREATE TABLE "dkim_key" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "sending_domain_id" INTEGER NOT NULL,
            "selector" VARCHAR(63) NOT NULL,
            "algorithm" VARCHAR(16) NOT NULL,
            "bits" INTEGER NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "public_key" TEXT NOT NULL,
            "private_key" {t.blob} NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "activated_at" {t.bigint},
            FOREIGN KEY ("sending_domain_id") REFERENCES "sending_domain" ("id")
                ON DELETE CASCADE)""",
        'CREATE INDEX "dkim_key_sending_domain_id" ON "dkim_key" ("sending_domain_id")',
        'CREATE UNIQUE INDEX "dkim_key_sending_domain_id_selector" '
        'ON "dkim_key" ("sending_domain_id", "selector")',
    ]
