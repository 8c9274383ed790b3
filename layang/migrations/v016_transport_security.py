"""Migration 16: transport security: MTA-STS cache, TLS-RPT results."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "transport security: MTA-STS cache, TLS-RPT results"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "mta_sts_policy" (
            "domain" VARCHAR(255) NOT NULL PRIMARY KEY,
            "policy_id" VARCHAR(32) NOT NULL,
            "mode" VARCHAR(16) NOT NULL,
            "mx" TEXT NOT NULL,
            "max_age" INTEGER NOT NULL,
            "text" TEXT NOT NULL,
            "fetched_at" {t.bigint} NOT NULL,
            "expires_at" {t.bigint} NOT NULL)""",
        f"""CREATE TABLE "tls_session_result" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "row_key" VARCHAR(64) NOT NULL,
            "day" VARCHAR(10) NOT NULL,
            "policy_domain" VARCHAR(255) NOT NULL,
            "policy_type" VARCHAR(16) NOT NULL,
            "policy_strings" TEXT NOT NULL,
            "mx_host" VARCHAR(255) NOT NULL,
            "result_type" VARCHAR(40) NOT NULL,
            "detail" TEXT NOT NULL,
            "sessions" INTEGER NOT NULL,
            "updated_at" {t.bigint} NOT NULL)""",
        'CREATE UNIQUE INDEX "tls_session_result_row_key" ON "tls_session_result" ("row_key")',
        'CREATE INDEX "tls_session_result_day_policy_domain" '
        'ON "tls_session_result" ("day", "policy_domain")',
        f"""CREATE TABLE "tls_report" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "day" VARCHAR(10) NOT NULL,
            "policy_domain" VARCHAR(255) NOT NULL,
            "status" VARCHAR(16) NOT NULL,
            "report_id" VARCHAR(200) NOT NULL,
            "rua" TEXT NOT NULL,
            "detail" TEXT NOT NULL,
            "created_at" {t.bigint} NOT NULL)""",
        'CREATE UNIQUE INDEX "tls_report_day_policy_domain" '
        'ON "tls_report" ("day", "policy_domain")',
    ]
