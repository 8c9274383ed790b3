"""Migration 7: suppression list."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "suppression list"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "suppression" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "email" VARCHAR(320) NOT NULL,
            "email_key" VARCHAR(320) NOT NULL,
            "reason" VARCHAR(16) NOT NULL,
            "transmission_id" VARCHAR(26),
            "detail" TEXT NOT NULL,
            "note" TEXT NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "suppression_account_id_email_key" '
        'ON "suppression" ("account_id", "email_key")',
        'CREATE INDEX "suppression_account_id_id" ON "suppression" ("account_id", "id")',
    ]
