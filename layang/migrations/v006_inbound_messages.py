"""Migration 6: unrecognised inbound mail."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "unrecognised inbound mail"


def statements(t: Dialect) -> list[str]:
    return [
        f"""CREATE TABLE "inbound_message" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "received_at" {t.bigint} NOT NULL,
            "mail_from" TEXT NOT NULL,
            "rcpt_to" TEXT NOT NULL,
            "size" INTEGER NOT NULL,
            "raw" {t.blob} NOT NULL,
            "reason" TEXT NOT NULL)""",
        'CREATE INDEX "inbound_message_received_at" ON "inbound_message" ("received_at")',
    ]
