"""Migration 32: what is one recipient's own in a send, and a send's tags.

A ``to`` entry may bring its own substitution data and metadata (CONTRACT section 23): its
copy's rendered subject and bodies are kept on its recipient row (``content``, JSON), with its
merged metadata (``metadata``, JSON; null: the transmission's). ``personalized`` tells the
worker which transmissions have recipients with content of their own, so that the others cost
no extra read.

A send's tags are kept on its transmission (``tags``, a JSON list, for records and webhook
events) and as ``transmission_tag`` rows, which the Activity filter reads and the overview's
triggers join: ``activity_tag_count`` is ``activity_count`` per tag, kept the same way (a
recipient stored Injection, every event), each row looked up by key.
"""

from __future__ import annotations

from layang.migrations.dialect import SQLITE, Dialect

NAME = "per-recipient content and metadata; tags and the overview's counts per tag"

_HOUR_MS = 3600000
_KEY = '("account_id", "hour", "tag", "kind")'
_COLUMNS = '("account_id", "hour", "tag", "kind", "count")'


def statements(t: Dialect) -> list[str]:
    tables = [
        'ALTER TABLE "recipient" ADD COLUMN "content" TEXT',
        'ALTER TABLE "recipient" ADD COLUMN "metadata" TEXT',
        'ALTER TABLE "transmission" ADD COLUMN "personalized" INTEGER NOT NULL DEFAULT 0',
        'ALTER TABLE "transmission" ADD COLUMN "tags" TEXT',
        """CREATE TABLE "transmission_tag" (
            "transmission_id" VARCHAR(26) NOT NULL,
            "account_id" INTEGER NOT NULL,
            "tag" VARCHAR(64) NOT NULL,
            PRIMARY KEY ("transmission_id", "tag"),
            FOREIGN KEY ("transmission_id") REFERENCES "transmission" ("id") ON DELETE CASCADE,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE INDEX "transmission_tag_transmission_id" ON "transmission_tag" ("transmission_id")',
        'CREATE INDEX "transmission_tag_account_id_tag_transmission_id" '
        'ON "transmission_tag" ("account_id", "tag", "transmission_id")',
        f"""CREATE TABLE "activity_tag_count" (
            "id" {t.autoincrement} NOT NULL PRIMARY KEY,
            "account_id" INTEGER NOT NULL,
            "hour" {t.bigint} NOT NULL,
            "tag" VARCHAR(64) NOT NULL,
            "kind" VARCHAR(32) NOT NULL,
            "count" {t.bigint} NOT NULL,
            FOREIGN KEY ("account_id") REFERENCES "account" ("id") ON DELETE CASCADE)""",
        'CREATE UNIQUE INDEX "activity_tag_count_account_id_hour_tag_kind" '
        f'ON "activity_tag_count" {_KEY}',
    ]
    if t is SQLITE:
        bounce_class = (
            """json_extract(CASE WHEN json_valid(NEW."detail") THEN NEW."detail" END, """
            "'$.bounceClass')"
        )
        kind = (
            f"""CASE WHEN NEW."status" = 'Bounce' THEN 'Bounce:' || """
            f"""coalesce({bounce_class}, 'undetermined') ELSE NEW."status" END"""
        )
        return [
            *tables,
            f"""CREATE TRIGGER "activity_tag_count_sent" AFTER INSERT ON "recipient"
            WHEN NEW."status" = 'Injection' BEGIN
              INSERT INTO "activity_tag_count" {_COLUMNS}
              SELECT NEW."account_id", NEW."created_at" / {_HOUR_MS} * {_HOUR_MS}, g."tag",
                     'Injection', 1
              FROM "transmission_tag" g WHERE g."transmission_id" = NEW."transmission_id"
              ON CONFLICT {_KEY} DO UPDATE SET "count" = "count" + 1;
            END""",  # noqa: S608 - fixed names only
            f"""CREATE TRIGGER "activity_tag_count_event" AFTER INSERT ON "event" BEGIN
              INSERT INTO "activity_tag_count" {_COLUMNS}
              SELECT r."account_id", NEW."created_at" / {_HOUR_MS} * {_HOUR_MS}, g."tag",
                     {kind}, 1
              FROM "recipient" r
              JOIN "transmission_tag" g ON g."transmission_id" = r."transmission_id"
              WHERE r."id" = NEW."recipient_id"
              ON CONFLICT {_KEY} DO UPDATE SET "count" = "count" + 1;
            END""",  # noqa: S608 - fixed names only
        ]
    kind = (
        "CASE WHEN n.\"status\" = 'Bounce' THEN 'Bounce:' || "
        "coalesce(CASE WHEN left(ltrim(n.\"detail\"), 1) = '{' "
        "THEN n.\"detail\"::json->>'bounceClass' END, 'undetermined') "
        'ELSE n."status" END'
    )
    upsert = (
        f"ON CONFLICT {_KEY} "
        'DO UPDATE SET "count" = "activity_tag_count"."count" + EXCLUDED."count"'
    )
    tags = (
        'CROSS JOIN LATERAL (SELECT "tag" FROM "transmission_tag" '
        '  WHERE "transmission_id" = {rows}."transmission_id" OFFSET 0) g'
    )
    return [
        *tables,
        f"""CREATE FUNCTION "activity_tag_count_sent"() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_tag_count" {_COLUMNS}
          SELECT n."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, g."tag",
                 'Injection', count(*)
          FROM "new_rows" n {tags.format(rows="n")}
          WHERE n."status" = 'Injection'
          GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        'CREATE TRIGGER "activity_tag_count_sent" AFTER INSERT ON "recipient" '
        'REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT '
        'EXECUTE FUNCTION "activity_tag_count_sent"()',
        f"""CREATE FUNCTION "activity_tag_count_event"() RETURNS trigger
        LANGUAGE plpgsql AS $$
        BEGIN
          INSERT INTO "activity_tag_count" {_COLUMNS}
          SELECT r."account_id", n."created_at" / {_HOUR_MS} * {_HOUR_MS}, g."tag",
                 {kind}, count(*)
          FROM "new_rows" n
          CROSS JOIN LATERAL (SELECT "account_id", "transmission_id"
            FROM "recipient" WHERE "id" = n."recipient_id" OFFSET 0) r
          {tags.format(rows="r")}
          GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
          {upsert};
          RETURN NULL;
        END $$""",  # noqa: S608 - fixed names only
        'CREATE TRIGGER "activity_tag_count_event" AFTER INSERT ON "event" '
        'REFERENCING NEW TABLE AS "new_rows" FOR EACH STATEMENT '
        'EXECUTE FUNCTION "activity_tag_count_event"()',
    ]
