"""Migration 10: direct to MX: recipient domains, MX sites, site throttles."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "direct to MX: recipient domains, MX sites, site throttles"


def statements(t: Dialect) -> list[str]:
    # The part after the last "@", lower-cased, in SQL both backends speak: rtrim() strips the
    # trailing characters that are not "@", leaving the local part and its "@".
    return [
        'ALTER TABLE "recipient" ADD COLUMN "domain" TEXT',
        'ALTER TABLE "recipient" ADD COLUMN "waiting_on" TEXT',
        'UPDATE "recipient" SET "domain" = lower(substr("address", '
        "length(rtrim(\"address\", replace(\"address\", '@', ''))) + 1))",
        'CREATE INDEX "recipient_domain_next_attempt_at" '
        'ON "recipient" ("domain", "next_attempt_at")',
        'CREATE INDEX "recipient_waiting_on" ON "recipient" ("waiting_on")',
        f"""CREATE TABLE "mx_domain" (
            "domain" VARCHAR(253) NOT NULL PRIMARY KEY,
            "site" TEXT NOT NULL,
            "expires_at" {t.bigint} NOT NULL)""",
        'CREATE INDEX "mx_domain_site" ON "mx_domain" ("site")',
        f"""CREATE TABLE "site_state" (
            "site" VARCHAR(1000) NOT NULL PRIMARY KEY,
            "connection_limit" INTEGER,
            "rule_limit" INTEGER,
            "state" VARCHAR(16) NOT NULL,
            "until_ms" {t.bigint},
            "reason" TEXT,
            "last_reply" TEXT,
            "pause_ms" {t.bigint} NOT NULL,
            "signal_at" {t.bigint},
            "failures" INTEGER NOT NULL,
            "rate_tat_us" {t.bigint},
            "updated_at" {t.bigint} NOT NULL)""",
        f"""CREATE TABLE "site_slot" (
            "id" VARCHAR(26) NOT NULL PRIMARY KEY,
            "site" VARCHAR(1000) NOT NULL,
            "owner" VARCHAR(64) NOT NULL,
            "expires_at" {t.bigint} NOT NULL)""",
        'CREATE INDEX "site_slot_site_expires_at" ON "site_slot" ("site", "expires_at")',
        'CREATE INDEX "site_slot_owner" ON "site_slot" ("owner")',
    ]
