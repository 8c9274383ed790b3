"""Migration 15: DMARC aggregate reports."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "DMARC aggregate reports"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "dmarc_report" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "domain" VARCHAR(253) NOT NULL,
            "org_name" TEXT NOT NULL,
            "report_id" VARCHAR(255) NOT NULL,
            "begins_at" {t.bigint} NOT NULL,
            "ends_at" {t.bigint} NOT NULL,
            "received_at" {t.bigint} NOT NULL)""",
        'CREATE INDEX "dmarc_report_domain" ON "dmarc_report" ("domain")',
        'CREATE UNIQUE INDEX "dmarc_report_org_name_report_id" '
        'ON "dmarc_report" ("org_name", "report_id")',
        f"""CREATE TABLE "dmarc_record" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "report_id" INTEGER NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "begins_at" {t.bigint} NOT NULL,
            "source_ip" VARCHAR(45) NOT NULL,
            "count" INTEGER NOT NULL,
            "disposition" VARCHAR(16) NOT NULL,
            "dkim" VARCHAR(16) NOT NULL,
            "spf" VARCHAR(16) NOT NULL,
            "dkim_aligned" INTEGER NOT NULL,
            "spf_aligned" INTEGER NOT NULL,
            "header_from" VARCHAR(253) NOT NULL,
            "dkim_domains" TEXT NOT NULL,
            FOREIGN KEY ("report_id") REFERENCES "dmarc_report" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "dmarc_record_report_id" ON "dmarc_record" ("report_id")',
        'CREATE INDEX "dmarc_record_domain_begins_at" ON "dmarc_record" ("domain", "begins_at")',
    ]
