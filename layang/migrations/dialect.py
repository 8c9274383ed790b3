"""What a migration is given: the column types that differ between SQLite and PostgreSQL.

A migration writes its statements once for both backends and takes these types from the
``Dialect`` it is called with; a migration that must say something else on one backend (a
trigger, a function) tests ``t is SQLITE`` or ``t is POSTGRESQL``. Statements are f-strings,
so a literal brace in one is doubled.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """The column types that differ between SQLite and PostgreSQL, as peewee spells them."""

    autoincrement: str  # an integer primary key the database numbers itself
    bigint: str
    blob: str


SQLITE = Dialect(autoincrement="INTEGER", bigint="INTEGER", blob="BLOB")
POSTGRESQL = Dialect(autoincrement="SERIAL", bigint="BIGINT", blob="BYTEA")
