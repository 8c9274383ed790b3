"""Migration 11: console sessions."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "console sessions"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "console_session" (
            "id" VARCHAR(64) NOT NULL PRIMARY KEY,
            "key_id" VARCHAR(32) NOT NULL,
            "created_at" {t.bigint} NOT NULL,
            "expires_at" {t.bigint} NOT NULL,
            FOREIGN KEY ("key_id") REFERENCES "api_key" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "console_session_key_id" ON "console_session" ("key_id")',
        'CREATE INDEX "console_session_expires_at" ON "console_session" ("expires_at")',
    ]
