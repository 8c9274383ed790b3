"""The schema's history: every change to the tables, in order, one frozen module per version.

Each ``vNNN_<what_it_does>.py`` (``v001_initial_schema.py``, ``v002_authorized_recipients.py``,
…) holds one migration: ``NAME``, a phrase logged when it is applied, and ``statements(t)``, the
DDL it runs, written once for both backends with the column types of the ``Dialect`` it is given
(``dialect.py``). ``runner.py`` finds them by file name and applies them in version order
(``upgrade``); ``schema.py`` prints the schema they produce, which ``docs/schema.sql`` holds.

A migration is frozen once released: it says exactly what it did on the day it was written,
never refers to the live models or to another migration's module, and is never edited
afterwards, since a database already at its version would never see the edit. Numbers are
never reused (9 and 13 were never used).

To change the schema:

1. add ``vNNN_<what_it_does>.py`` with the next number (new tables, ``ALTER TABLE … ADD
   COLUMN``, indexes, triggers), copying any helper it needs into it;
2. change ``layang/models/`` to match, a new model handed on by its ``__init__.py`` and added
   to ``MODELS`` (``tests/test_migrations.py`` compares the two, and upgrades a database
   stopped after every version);
3. regenerate ``docs/schema.sql``:
   ``python -m layang.migrations.schema --postgresql URL > docs/schema.sql``;
4. once released, add its digest to ``RELEASED`` in ``tests/test_schema.py``, which fails when
   a released migration's statements change.
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
