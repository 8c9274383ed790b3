"""Migration 19: large messages' payloads stored in chunks."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "large messages' payloads stored in chunks"


def statements(t: Dialect) -> list[str]:
    return [
        """CREATE TABLE "payload_chunk" (
            "transmission_id" VARCHAR(26) NOT NULL,
            "seq" INTEGER NOT NULL,
            "text" TEXT NOT NULL,
            PRIMARY KEY ("transmission_id", "seq"),
            FOREIGN KEY ("transmission_id") REFERENCES "transmission" ("id") ON DELETE CASCADE)""",
    ]
