"""Migration 20: idle webhook dispatchers are notified of new work."""

from __future__ import annotations

from layang.migrations.dialect import POSTGRESQL, Dialect

NAME = "idle webhook dispatchers are notified of new work"


def statements(t: Dialect) -> list[str]:
    # An idle dispatcher LISTENs instead of polling (SQLite has nothing to notify: it polls).
    # One notification per statement that stored rows, whichever code path stored them.
    if t is not POSTGRESQL:
        return []
    return [
        """CREATE FUNCTION "webhook_notify"() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF EXISTS (SELECT 1 FROM "new_rows") THEN
            PERFORM pg_notify('layang_webhooks', '');
          END IF;
          RETURN NULL;
        END $$""",
        *(
            f'CREATE TRIGGER "{table}_notify" AFTER INSERT ON "{table}" '
            'REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT '
            'EXECUTE FUNCTION "webhook_notify"()'
            for table in ("webhook_event", "webhook_delivery")
        ),
    ]
