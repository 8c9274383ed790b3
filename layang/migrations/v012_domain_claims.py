"""Migration 12: pending domain claims coexist, one verified owner."""

from __future__ import annotations

from layang.migrations.dialect import Dialect

NAME = "pending domain claims coexist, one verified owner"


def statements(t: Dialect) -> list[str]:
    # Pending claims of one domain may coexist across accounts; only one may be verified.
    return [
        'DROP INDEX "sending_domain_domain"',
        'CREATE UNIQUE INDEX "sending_domain_account_id_domain" '
        'ON "sending_domain" ("account_id", "domain")',
        'CREATE UNIQUE INDEX "sending_domain_verified_domain" '
        """ON "sending_domain" ("domain") WHERE ("status" = 'verified')""",
    ]
