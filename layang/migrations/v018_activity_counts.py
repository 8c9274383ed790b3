"""Migration 18: the overview's counts.

Counted by the database itself as events are stored, whichever code stores them: one row per
account, hour, sending domain (the From address's) and kind of event, so that the console's
overview reads a few hundred rows instead of every event. A recipient stored as queued counts
as sent ("Injection"); a Bounce counts under its class ("Bounce:hard"). SQLite counts row by
row (it has one writer); PostgreSQL counts once per statement over the rows it inserted,
grouped, in key order so that concurrent writers take the counters' locks in the same order.
The mail already stored is counted once, after the triggers exist (their locks keep writers
out meanwhile): recipients that were not suppressed on arrival as sent, and every event.
"""

from __future__ import annotations

from layang.migrations.dialect import SQLITE, Dialect

NAME = "the overview's counts"

_HOUR_MS = 3600000


def _sqlite_domain(email: str) -> str:
    # What follows the last "@": strip the trailing run of characters that are not "@".
    return f"lower(substr({email}, length(rtrim({email}, replace({email}, '@', ''))) + 1))"


def _activity_counts_so_far(domain: str, hour: str, kind: str) -> list[str]:
    columns = '("account_id", "hour", "domain", "kind", "count")'
    return [
        f"""INSERT INTO "activity_count" {columns}
        SELECT r."account_id", {hour.format(at='r."created_at"')}, {domain}, 'Injection', count(*)
        FROM "recipient" r JOIN "transmission" t ON t."id" = r."transmission_id"
        WHERE r."status" <> 'Suppressed'
        GROUP BY 1, 2, 3""",  # noqa: S608 - fixed names only
        f"""INSERT INTO "activity_count" {columns}
        SELECT r."account_id", {hour.format(at='e."created_at"')}, {domain}, {kind}, count(*)
        FROM "event" e JOIN "recipient" r ON r."id" = e."recipient_id"
        JOIN "transmission" t ON t."id" = r."transmission_id"
        GROUP BY 1, 2, 3, 4""",  # noqa: S608 - fixed names only
    ]


def statements(t: Dialect) -> list[str]:
    table = f"""CREATE TABLE "activity_count" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "hour" {t.bigint} NOT NULL,
            "domain" VARCHAR(253) NOT NULL,
            "kind" VARCHAR(32) NOT NULL,
            "count" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)"""
    index = (
        'CREATE UNIQUE INDEX "activity_count_account_id_hour_domain_kind" '
        'ON "activity_count" ("account_id", "hour", "domain", "kind")'
    )
    key = '("account_id", "hour", "domain", "kind")'
    columns = '("account_id", "hour", "domain", "kind", "count")'
    if t is SQLITE:
        # Text that is not JSON (never written by Layang, but a database may hold anything)
        # counts under no domain or class rather than failing the write.
        email = (
            'json_extract(CASE WHEN json_valid(t."from_header") THEN t."from_header" END, '
            "'$.email')"
        )
        domain = f"coalesce({_sqlite_domain(email)}, '')"
        bounce_class = (
            'json_extract(CASE WHEN json_valid(NEW."detail") THEN NEW."detail" END, '
            "'$.bounceClass')"
        )
        return [
            table,
            index,
            f"""CREATE TRIGGER "activity_count_sent" AFTER INSERT ON "recipient"
            WHEN NEW."status" = 'Injection' BEGIN
              INSERT INTO "activity_count" {columns}
              SELECT NEW."account_id", NEW."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                     'Injection', 1
              FROM "transmission" t WHERE t."id" = NEW."transmission_id"
              ON CONFLICT {key} DO UPDATE SET "count" = "count" + 1;
            END""",  # noqa: S608 - fixed names only
            f"""CREATE TRIGGER "activity_count_event" AFTER INSERT ON "event" BEGIN
              INSERT INTO "activity_count" {columns}
              SELECT r."account_id", NEW."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                     CASE WHEN NEW."status" = 'Bounce'
                          THEN 'Bounce:' || coalesce({bounce_class}, 'undetermined')
                          ELSE NEW."status" END, 1
              FROM "recipient" r JOIN "transmission" t ON t."id" = r."transmission_id"
              WHERE r."id" = NEW."recipient_id"
              ON CONFLICT {key} DO UPDATE SET "count" = "count" + 1;
            END""",  # noqa: S608 - fixed names only
            *_activity_counts_so_far(
                domain,
                f"{{at}} / {_HOUR_MS} * {_HOUR_MS}",
                "CASE WHEN e.\"status\" = 'Bounce' THEN 'Bounce:' || "
                'coalesce(json_extract(CASE WHEN json_valid(e."detail") THEN e."detail" END, '
                "'$.bounceClass'), 'undetermined') "
                'ELSE e."status" END',
            ),
        ]
    domain = (
        "coalesce(lower(regexp_replace(CASE WHEN left(ltrim(t.\"from_header\"), 1) = '{' "
        "THEN t.\"from_header\"::json->>'email' END, '^.*@', '')), '')"
    )
    upsert = (
        f'ON CONFLICT {key} DO UPDATE SET "count" = "activity_count"."count" + EXCLUDED."count"'
    )
    return [
        table,
        index,
        f"""CREATE FUNCTION "activity_count_sent"() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {columns}
          SELECT n."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 'Injection', count(*)
          FROM "new_rows" n JOIN "transmission" t ON t."id" = n."transmission_id"
          WHERE n."status" = 'Injection'
          GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        'CREATE TRIGGER "activity_count_sent" AFTER INSERT ON "recipient" '
        'REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT '
        'EXECUTE FUNCTION "activity_count_sent"()',
        f"""CREATE FUNCTION "activity_count_event"() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_count" {columns}
          SELECT r."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, {domain},
                 CASE WHEN n."status" = 'Bounce'
                      THEN 'Bounce:' || coalesce(CASE WHEN left(ltrim(n."detail"), 1) = '{{'
                        THEN n."detail"::json->>'bounceClass' END, 'undetermined')
                      ELSE n."status" END,
                 count(*)
          FROM "new_rows" n JOIN "recipient" r ON r."id" = n."recipient_id"
          JOIN "transmission" t ON t."id" = r."transmission_id"
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        'CREATE TRIGGER "activity_count_event" AFTER INSERT ON "event" '
        'REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT '
        'EXECUTE FUNCTION "activity_count_event"()',
        *_activity_counts_so_far(
            domain,
            f"{{at}} / {_HOUR_MS} * {_HOUR_MS}",
            "CASE WHEN e.\"status\" = 'Bounce' THEN 'Bounce:' || "
            "coalesce(CASE WHEN left(ltrim(e.\"detail\"), 1) = '{' "
            "THEN e.\"detail\"::json->>'bounceClass' END, 'undetermined') ELSE e.\"status\" END",
        ),
    ]
