"""Migration 3: templates."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "templates"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "template" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "template_id" VARCHAR(64) NOT NULL,
            "name" TEXT NOT NULL,
            "current_version" INTEGER NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "updated_at" {t.bigint} NOT NULL)""",
        'CREATE INDEX "template_account_id" ON "template" ("account_id")',
        'CREATE UNIQUE INDEX "template_account_id_template_id" '
        'ON "template" ("account_id", "template_id")',
        f"""CREATE TABLE "template_version" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "template_id" INTEGER NOT NULL,
            "version" INTEGER NOT NULL,
            "revision" VARCHAR(32) NOT NULL,
            "name" TEXT NOT NULL,
            "subject" TEXT,
            "source_html" TEXT,
            "body_html" TEXT,
            "body_text" TEXT,
            "shortcodes" TEXT NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("template_id") REFERENCES "template" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "template_version_template_id" ON "template_version" ("template_id")',
        'CREATE UNIQUE INDEX "template_version_revision" ON "template_version" ("revision")',
        'CREATE UNIQUE INDEX "template_version_template_id_version" '
        'ON "template_version" ("template_id", "version")',
    ]
