"""Migration 22: the overview's counts look records up by key."""

from __future__ import annotations

from layang.migrations.dialect import POSTGRESQL, Dialect

NAME = "the overview's counts look records up by key"

_HOUR_MS = 3600000
_COUNT_KEY = '("account_id", "hour", "domain", "stream", "kind")'
_COUNT_COLUMNS = '("account_id", "hour", "domain", "stream", "kind", "count")'


def _stream_of(priority: str) -> str:
    return f"CASE WHEN {priority} = 1 THEN 'broadcast' ELSE 'transactional' END"


def statements(t: Dialect) -> list[str]:
    # PostgreSQL planned the triggers' joins of "new_rows" (a transition table, of unknown size
    # to the planner) as hash joins over a scan of every recipient and transmission ever kept:
    # 5 ms per batch of 40 events at 5,000 records, growing with the table. Each row is now
    # looked up by its key (OFFSET 0 keeps the planner from turning the lookup into a join).
    if t is not POSTGRESQL:
        return []  # SQLite's triggers run per row and look up by key already
    domain = (
        "coalesce(lower(regexp_replace(CASE WHEN left(ltrim(t.\"from_header\"), 1) = '{' "
        "THEN t.\"from_header\"::json->>'email' END, '^.*@', '')), '')"
    )
    bounce_kind = (
        "CASE WHEN n.\"status\" = 'Bounce' THEN 'Bounce:' || "
        "coalesce(CASE WHEN left(ltrim(n.\"detail\"), 1) = '{' "
        "THEN n.\"detail\"::json->>'bounceClass' END, 'undetermined') "
        'ELSE n."status" END'
    )
    upsert = (
        f"ON CONFLICT {_COUNT_KEY} "
        'DO UPDATE SET "count" = "activity_count"."count" + EXCLUDED."count"'
    )
    transmission = (
        'CROSS JOIN LATERAL (SELECT "from_header" FROM "transmission" '
        '  WHERE "id" = {rows}."transmission_id" OFFSET 0) t'
    )
    return [
        f"""CREATE OR REPLACE FUNCTION "activity_count_sent"() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {_COUNT_COLUMNS}
          SELECT n."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 {_stream_of('n."priority"')}, 'Injection', count(*)
          FROM "new_rows" n {transmission.format(rows="n")}
          WHERE n."status" = 'Injection'
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        f"""CREATE OR REPLACE FUNCTION "activity_count_event"() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {_COUNT_COLUMNS}
          SELECT r."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 {_stream_of('r."priority"')}, {bounce_kind}, count(*)
          FROM "new_rows" n
          CROSS JOIN LATERAL (SELECT "account_id", "priority", "transmission_id"
            FROM "recipient" WHERE "id" = n."recipient_id" OFFSET 0) r
          {transmission.format(rows="r")}
          GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
    ]
