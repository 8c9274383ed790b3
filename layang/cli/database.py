"""``layang db``: the database schema, created or upgraded (``db upgrade``) and shown as it
stands (``db schema``); ``db backup`` lives in ``layang.cli.backup``."""

from __future__ import annotations

import click

from layang.cli.output import emit
from layang.cli.startup import fail, prepare
from layang.cli.uses import STORE, Uses
from layang.db import database, open_database
from layang.migrations import upgrade
from layang.migrations.schema import describe as describe_schema
from layang.serving.preflight import CREATE, EXISTING, Needs, NoDatabase


@click.group("db")
def db_group() -> None:
    """Database schema."""


@Uses(Needs(CREATE), STORE)
@db_group.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema (idempotent)."""
    config, _ = prepare()
    open_database(config.database_url)
    applied = upgrade()
    emit({"applied": applied})


@Uses(Needs(EXISTING), STORE)
@db_group.command("schema")
def db_schema() -> None:
    """Print the database's tables, indexes and triggers (never migrates it).

    As its backend's section of docs/schema.sql shows them: the same text once the database is
    upgraded, so a difference shows what the database lacks or holds besides."""
    config, _ = prepare()
    open_database(config.database_url)
    if not database.table_exists("account"):
        fail(str(NoDatabase(config.database_url)))
    database.close()
    click.echo(describe_schema(config.database_url), nl=False)
