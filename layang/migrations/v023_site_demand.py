"""Migration 23: a site's slots are wanted by a waiting process."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "a site's slots are wanted by a waiting process"


def statements(t: Dialect) -> list[str]:
    # A process refused a site's slot marks it wanted, so the holders give back idle ones.
    return [
        f'ALTER TABLE "site_state" ADD COLUMN "wanted_at" {t.bigint}',
        'ALTER TABLE "site_state" ADD COLUMN "wanted_by" VARCHAR(64)',
    ]
