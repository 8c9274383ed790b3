"""Migration 17: REQUIRETLS and TLS-Required: No on messages."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "REQUIRETLS and TLS-Required: No on messages"


def statements(t: Dialect) -> list[str]:
    return ['ALTER TABLE "transmission" ADD COLUMN "tls_requirement" VARCHAR(16)']
