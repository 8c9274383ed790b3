"""The schema's history: every change to the tables, in order, one frozen module per version.

``v001_initial_schema.py`` … ``v023_site_demand.py`` each hold one migration: ``NAME`` and
``statements(t)``, the DDL it ran, written for both backends with the column types of the
``Dialect`` it is given (``dialect.py``). A migration is frozen once released: it says exactly
what it did on the day it was written, never refers to the live models or to another
migration's module, and is never edited afterwards, so a database left at any version upgrades
to the same schema as a fresh one. Numbers are never reused; 9 and 13 were never used.

To change the schema, add ``vNNN_<what_it_does>.py`` with the next number (new tables,
``ALTER TABLE … ADD COLUMN``, indexes, triggers), change ``layang/models.py`` to match, and
regenerate ``docs/schema.sql`` (``python -m layang.migrations.schema --write``);
``tests/test_migrations.py`` compares the models, the migrations and that file.
``runner.py`` applies them (``upgrade``), ``schema.py`` prints the schema they produce.
"""

from layang.migrations.dialect import POSTGRESQL, SQLITE, Dialect
from layang.migrations.runner import MIGRATIONS, Migration, SchemaVersion, upgrade, upgrade_once

__all__ = [
    "MIGRATIONS",
    "POSTGRESQL",
    "SQLITE",
    "Dialect",
    "Migration",
    "SchemaVersion",
    "upgrade",
    "upgrade_once",
]
