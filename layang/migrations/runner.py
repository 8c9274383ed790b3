"""How the schema's version is stored and the migrations are applied, on SQLite and PostgreSQL.

The versions applied are rows of ``schema_version`` (one per migration, with when it was
applied); ``upgrade()`` applies, in version order, each migration whose row is missing, its
statements and its row in one transaction, so a migration is applied whole or not at all. The
migrations themselves are the modules ``vNNN_<name>.py`` beside this one, found by their file
names (see ``layang/migrations/__init__.py`` for how to add one).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import peewee

from layang.clock import now_ms
from layang.db import database, is_postgresql, write_transaction
from layang.migrations.dialect import POSTGRESQL, SQLITE, Dialect

log = logging.getLogger("layang.migrations")

PACKAGE = "layang.migrations"
VERSION_FILE = re.compile(r"v(\d{3})_([a-z0-9_]+)")


@dataclass(frozen=True)
class Migration:
    """One version of the schema: its number, what it is (logged when applied), its DDL."""

    version: int
    name: str
    statements: Callable[[Dialect], list[str]]


def discover() -> tuple[Migration, ...]:
    """Every ``vNNN_<name>`` module of this package as a ``Migration``, in version order.

    Each module holds ``NAME`` (a phrase) and ``statements(t: Dialect) -> list[str]``. Raises
    ``ValueError`` when two modules claim one version, or a module looks like a migration
    (``v`` and a digit) but is not named like one, rather than leave it out unnoticed.
    """
    found: dict[int, Migration] = {}
    folder = str(Path(__file__).parent)
    for module_info in pkgutil.iter_modules([folder]):
        match = VERSION_FILE.fullmatch(module_info.name)
        if not match:
            if re.match(r"v\d", module_info.name):
                raise ValueError(f"{module_info.name}: name a migration vNNN_<what_it_does>")
            continue
        version = int(match.group(1))
        if version in found:
            raise ValueError(f"two migrations claim version {version}: {module_info.name}")
        module = importlib.import_module(f"{PACKAGE}.{module_info.name}")
        found[version] = Migration(version, module.NAME, module.statements)
    return tuple(found[version] for version in sorted(found))


MIGRATIONS: tuple[Migration, ...] = discover()


class SchemaVersion(peewee.Model):
    """One row per applied migration."""

    version = peewee.IntegerField(primary_key=True)
    applied_at = peewee.BigIntegerField()

    class Meta:
        database = database
        table_name = "schema_version"


def _schema_version_table(t: Dialect) -> str:
    return (
        'CREATE TABLE IF NOT EXISTS "schema_version" '
        f'("version" INTEGER NOT NULL PRIMARY KEY, "applied_at" {t.bigint} NOT NULL)'
    )


def upgrade(migrations: Sequence[Migration] = MIGRATIONS) -> list[int]:
    """Apply every migration not yet recorded in ``schema_version``, each in its own transaction.

    Safe to run concurrently from several processes (each migration runs once) and idempotent;
    returns the versions this call applied. Raises the driver's error if the database cannot be
    reached, and whatever a failing statement raises (its migration is then rolled back).
    """
    dialect = POSTGRESQL if is_postgresql() else SQLITE
    database.connect(reuse_if_open=True)
    with write_transaction():
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide on PostgreSQL's catalog, when
        # several processes start at once on an empty database.
        _lock_schema()
        database.execute_sql(_schema_version_table(dialect))
    applied = []
    for migration in sorted(migrations, key=lambda m: m.version):
        with write_transaction():
            _lock_schema()
            if SchemaVersion.get_or_none(SchemaVersion.version == migration.version):
                continue
            for statement in migration.statements(dialect):
                database.execute_sql(statement)
            SchemaVersion.create(version=migration.version, applied_at=now_ms())
        log.info("schema migration %d applied: %s", migration.version, migration.name)
        applied.append(migration.version)
    newest = max((m.version for m in migrations), default=0)
    log.info("schema up to date at version %d", newest)
    return applied


def _lock_schema() -> None:
    # Migrations wait for each other across processes; SQLite's IMMEDIATE transaction already
    # serialises them.
    if is_postgresql():
        database.execute_sql("SELECT pg_advisory_xact_lock(7411)")


# Database URLs whose schema this process, or the gunicorn master it was forked from, has
# already brought up to date.
_up_to_date: set[str] = set()


def upgrade_once(url: str) -> list[int]:
    """``upgrade()`` the database at ``url`` (already opened) unless this process already did.

    A forked child inherits the record, so the gunicorn workers of a master that upgraded (see
    ``layang.serving.processes``) only open the database. A process that finds the database
    unreachable records nothing and tries again on its next call. Raises as ``upgrade()`` does.
    """
    if url in _up_to_date:
        return []
    applied = upgrade()
    _up_to_date.add(url)
    return applied
