"""The schema the migrations produce, as text: what ``docs/schema.sql`` holds.

Run ``python -m layang.migrations.schema --postgresql URL > docs/schema.sql`` (``URL`` names a
PostgreSQL server on which its user may create databases, e.g.
``postgresql://postgres@127.0.0.1:5432/postgres``). It migrates a throwaway SQLite file and a
throwaway PostgreSQL database from nothing (``upgrade()``), reads back what each database holds
(``sqlite_master``; PostgreSQL's catalogs), and prints both as one file. The output depends only
on the migrations and the database's major version: objects are sorted by name, and nothing
that varies between machines (dates, server versions, owners, ``SET`` lines) is printed.

The text is a description to read, not a script to run: a database is made by
``layang db upgrade``.
"""

from __future__ import annotations

import argparse
import re
import secrets
import sqlite3
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from layang.db import database, open_database
from layang.migrations.runner import MIGRATIONS, upgrade

POSTGRESQL_TITLE = "PostgreSQL"
SQLITE_TITLE = "SQLite"
_RULE = "-- " + "=" * 97

HEADER = f"""\
-- Layang's database schema after migration {MIGRATIONS[-1].version}, as a fresh database has it.
--
-- Generated: do not edit. The migrations in layang/migrations/ are the source; after adding one,
-- regenerate this file with
--     python -m layang.migrations.schema --postgresql URL > docs/schema.sql
-- where URL names a PostgreSQL server whose user may create a throwaway database (e.g.
-- postgresql://postgres@127.0.0.1:5432/postgres); tests/test_schema.py fails while this file
-- differs from what the migrations produce. Two sections follow, PostgreSQL (the production
-- database) then SQLite, each table followed by its indexes and triggers, all sorted by name.
--
-- Counts kept by the database itself, so that no code path that stores mail can miss them:
--   activity_count_sent (trigger on "recipient")  counts each recipient stored as queued as sent
--       ("Injection") in "activity_count": the overview's hourly counts per account, sending
--       domain and stream (migrations 18, 21, 22).
--   activity_count_event (trigger on "event")  counts each event stored in "activity_count"
--       under its kind (a bounce under its class, "Bounce:hard"), per account, hour, sending
--       domain and stream: the activity counts by stream the overview charts (18, 21, 22).
--   activity_tag_count_sent, activity_tag_count_event (on "recipient", "event")  the same per
--       tag of the mail, in "activity_tag_count", joining "transmission_tag" (migration 32).
--   webhook_event_notify, webhook_delivery_notify (PostgreSQL only)  wake idle webhook
--       dispatchers (NOTIFY layang_webhooks) when webhook work is stored (migration 20).
-- Partitioned by week on PostgreSQL (migration 34; each "PARTITION BY" below): transmission,
--   transmission_tag, payload_chunk, recipient, event, webhook_delivery, webhook_attempt,
--   webhook_event. Their partitions (<table>_history, <table>_pYYYYMMDD, <table>_default) are
--   made and dropped by layang/lifecycle/partitions.py and not listed here.
-- The circuit breaker's counters ("breaker_count") are not kept by a trigger: layang/mail/
-- reputation.py adds to them in the same transaction as the events they count.
"""


def _heading(title: str) -> str:
    return f"{_RULE}\n-- {title}\n{_RULE}\n"


def render(postgresql: str, sqlite: str) -> str:
    """The whole of ``docs/schema.sql`` from its two sections' bodies."""
    return (
        f"{HEADER}\n{_heading(POSTGRESQL_TITLE)}\n{postgresql}\n{_heading(SQLITE_TITLE)}\n{sqlite}"
    )


def sections(text: str) -> dict[str, str]:
    """The bodies of the sections of a file ``render`` made, by title (``PostgreSQL``,
    ``SQLite``); ``{}`` for text without them."""
    parts = re.split(rf"^{re.escape(_RULE)}\n-- (\w+)\n{re.escape(_RULE)}\n\n", text, flags=re.M)
    titles, bodies = parts[1::2], parts[2::2]
    # A section ends with the blank line that separates it from the next one's heading.
    return {
        title: body if n == len(titles) - 1 else body.removesuffix("\n")
        for n, (title, body) in enumerate(zip(titles, bodies, strict=True))
    }


# -- SQLite ---------------------------------------------------------------------------------------

_SQLITE_KINDS = {"table": 0, "index": 1, "trigger": 2}


def describe_sqlite(path: str | Path) -> str:
    """Every table, index and trigger of the SQLite database at ``path``, as SQLite stores their
    ``CREATE`` statements (an ``ALTER TABLE … ADD COLUMN`` is folded into its table's), one
    table after another in name order, each followed by its indexes and triggers."""
    conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_master "
            "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
    finally:
        conn.close()
    rows.sort(key=lambda row: (row[2], _SQLITE_KINDS.get(row[0], len(_SQLITE_KINDS)), row[1]))
    return "".join(
        ("\n" if kind == "table" else "") + _tidy(sql) + ";\n" for kind, _, _, sql in rows
    ).removeprefix("\n")


def _tidy(sql: str) -> str:
    # SQLite keeps each statement as written, indented for the Python source it came from:
    # shift its continuation lines so that the least indented sits four spaces in.
    first, *rest = sql.strip().splitlines()
    lines = [line for line in rest if line.strip()]
    margin = min((len(line) - len(line.lstrip()) for line in lines), default=0)
    tidied = [first]
    for line in lines:
        body = line[margin:].rstrip()
        tidied.append(body if body.startswith(("END", ")")) else "    " + body)
    return "\n".join(tidied)


def describe(url: str) -> str:
    """The definitions of the database at ``url`` (a Layang database URL), as its backend's
    section of ``docs/schema.sql`` shows them; reads only. Raises the driver's errors."""
    if url.startswith("sqlite:"):
        return describe_sqlite(url.split(":///", 1)[-1].split("?", 1)[0])
    return describe_postgresql(url)


def sqlite_schema() -> str:
    """The SQLite section: a throwaway SQLite file, migrated from nothing, described."""
    with tempfile.TemporaryDirectory(prefix="layang-schema-") as folder:
        path = Path(folder) / "schema.db"
        with _migrated(f"sqlite:///{path}"):
            pass
        return describe_sqlite(path)


# -- PostgreSQL -----------------------------------------------------------------------------------

# Each query reads one kind of object of the current schema, sorted, with the server's own
# functions for the definitions (pg_get_*), so that nothing is spelt by hand.
# Aggregates have no pg_get_functiondef, and an extension's functions are the extension's.
_PG_FUNCTIONS = """
    SELECT p.proname, pg_get_functiondef(p.oid) FROM pg_proc p
    WHERE p.pronamespace = current_schema()::regnamespace AND p.prokind IN ('f', 'p')
      AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_proc'::regclass
                      AND d.objid = p.oid AND d.deptype = 'e')
    ORDER BY p.proname, pg_get_function_identity_arguments(p.oid)"""
# Partitioned tables are shown once, with their partition key; their partitions (made by day,
# named by date) are not: they are data, not schema.
_PG_TABLES = """
    SELECT c.oid, c.relname, CASE WHEN c.relkind = 'p' THEN pg_get_partkeydef(c.oid) END
    FROM pg_class c
    WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
      AND NOT c.relispartition
    ORDER BY c.relname"""
_PG_COLUMNS = """
    SELECT a.attname, format_type(a.atttypid, a.atttypmod), pg_get_expr(d.adbin, d.adrelid),
           a.attnotnull
    FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"""
_PG_CONSTRAINTS = """
    SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s
    ORDER BY array_position(ARRAY['p', 'u', 'f', 'c', 'x']::"char"[], contype), conname"""
_PG_SEQUENCES = """
    SELECT s.relname, format_type(q.seqtypid, NULL), a.attname FROM pg_depend dep
    JOIN pg_class s ON s.oid = dep.objid AND s.relkind = 'S'
    JOIN pg_sequence q ON q.seqrelid = s.oid
    JOIN pg_attribute a ON a.attrelid = dep.refobjid AND a.attnum = dep.refobjsubid
    WHERE dep.classid = 'pg_class'::regclass AND dep.refobjid = %s AND dep.deptype = 'a'
    ORDER BY s.relname"""
_PG_INDEXES = """
    SELECT pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE i.indrelid = %s
      AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = i.indexrelid)
    ORDER BY c.relname"""
_PG_TRIGGERS = """
    SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = %s AND NOT tgisinternal
    ORDER BY tgname"""


def describe_postgresql(url: str) -> str:
    """Every function, table (columns, defaults, constraints), sequence, index and trigger in
    the current schema of the PostgreSQL database at ``url``, as the server's catalogs define
    them: functions first, then one table after another in name order, each followed by its
    sequences, indexes and triggers. Needs psycopg2; raises its errors."""
    conn = _connect(url)
    try:
        with conn.cursor() as cursor:
            # Names in the one schema need no qualifying, whatever the URL's user chose.
            cursor.execute("SELECT set_config('search_path', current_schema(), false)")
            blocks = [_plain(definition) + ";\n" for _, definition in _rows(cursor, _PG_FUNCTIONS)]
            for oid, table, partition_key in _rows(cursor, _PG_TABLES):
                blocks.append(_pg_table(cursor, oid, table, partition_key))
    finally:
        conn.close()
    return "\n".join(blocks)


def _pg_table(cursor: Any, oid: int, table: str, partition_key: str | None) -> str:
    lines = [
        f"    {_quoted(name)} {kind}"
        + (f" DEFAULT {default}" if default is not None else "")
        + (" NOT NULL" if not_null else "")
        for name, kind, default, not_null in _rows(cursor, _PG_COLUMNS, oid)
    ]
    lines += [
        f"    CONSTRAINT {_quoted(name)} {definition}"
        for name, definition in _rows(cursor, _PG_CONSTRAINTS, oid)
    ]
    text = f"CREATE TABLE {_quoted(table)} (\n" + ",\n".join(lines) + "\n)"
    text += f" PARTITION BY {partition_key};\n" if partition_key else ";\n"
    for sequence, kind, column in _rows(cursor, _PG_SEQUENCES, oid):
        text += f"CREATE SEQUENCE {_quoted(sequence)} AS {kind} "
        text += f"OWNED BY {_quoted(table)}.{_quoted(column)};\n"
    for query in (_PG_INDEXES, _PG_TRIGGERS):
        text += "".join(definition + ";\n" for (definition,) in _rows(cursor, query, oid))
    return text


def _plain(definition: str) -> str:
    return "\n".join(line.rstrip() for line in definition.strip().splitlines())


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _rows(cursor: Any, query: str, *params: object) -> list[tuple]:
    cursor.execute(query, params or None)
    return cursor.fetchall()


def _connect(url: str) -> Any:
    import psycopg2  # only where PostgreSQL is used, as layang.db

    conn = psycopg2.connect(url, connect_timeout=5)
    conn.autocommit = True
    return conn


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def postgresql_schema(server_url: str) -> str:
    """The PostgreSQL section: a throwaway database on the server at ``server_url`` (whose user
    may create databases), migrated from nothing, described, and dropped."""
    name = f"layang_schema_{secrets.token_hex(4)}"
    admin = _connect(server_url)
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        try:
            url = _with_database(server_url, name)
            with _migrated(url):
                pass
            return describe_postgresql(url)
        finally:
            with admin.cursor() as cursor:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


@contextmanager
def _migrated(url: str) -> Iterator[None]:
    # The shared proxy is borrowed for the upgrade and given back to whatever it was bound to.
    previous = database.obj
    db = open_database(url)
    try:
        upgrade()
        yield
    finally:
        db.close()
        database.initialize(previous)


def main(argv: list[str] | None = None) -> int:
    """Print ``docs/schema.sql`` as the migrations produce it today."""
    parser = argparse.ArgumentParser(
        prog="python -m layang.migrations.schema",
        description="Print the schema a fresh database has after every migration "
        "(docs/schema.sql).",
    )
    parser.add_argument(
        "--postgresql",
        metavar="URL",
        required=True,
        help="a PostgreSQL server whose user may create (and drop) a throwaway database",
    )
    args = parser.parse_args(argv)
    sys.stdout.write(render(postgresql_schema(args.postgresql), sqlite_schema()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
