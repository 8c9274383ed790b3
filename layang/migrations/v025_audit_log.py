"""Migration 25: the audit log, one row per change made by a person or an API key."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "the audit log, one row per change made by a person or an API key"


def statements(t: Dialect) -> list[str]:
    # Kept by account and time; read newest first, optionally by actor or action. ``actor`` is
    # "user:<email>" or "key:<id>" or "system"; ``target`` never holds a recipient's address (an
    # erasure records its hash).
    return [
        'CREATE TABLE "audit_entry" ('
        f'"id" {t.autoincrement} NOT NULL PRIMARY KEY, '
        '"account_id" INTEGER REFERENCES "account" ("id") ON DELETE CASCADE, '
        f'"at" {t.bigint} NOT NULL, '
        '"actor" VARCHAR(320) NOT NULL, '
        '"action" VARCHAR(64) NOT NULL, '
        '"target" VARCHAR(512) NOT NULL, '
        '"source" VARCHAR(64) NOT NULL, '
        '"detail" TEXT NOT NULL)',
        'CREATE INDEX "audit_entry_account_id_at" ON "audit_entry" ("account_id", "at")',
        'CREATE INDEX "audit_entry_at" ON "audit_entry" ("at")',
    ]
