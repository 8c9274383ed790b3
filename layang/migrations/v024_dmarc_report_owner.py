"""Migration 24: a DMARC report belongs to the account that had the domain verified."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "a DMARC report belongs to the account that had the domain verified"


def statements(t: Dialect) -> list[str]:
    # Reports were kept by domain name alone, so any account claiming the name read them. Those
    # already kept go to the domain's verified owner, if it has one; the others to nobody.
    return [
        'ALTER TABLE "dmarc_report" ADD COLUMN "account_id" INTEGER '
        'REFERENCES "account" ("id") ON DELETE CASCADE',
        'UPDATE "dmarc_report" SET "account_id" = (SELECT s."account_id" FROM "sending_domain" s '
        """WHERE s."domain" = "dmarc_report"."domain" AND s."status" = 'verified')""",
        'CREATE INDEX "dmarc_report_account_id" ON "dmarc_report" ("account_id")',
    ]
