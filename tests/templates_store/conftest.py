from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import peewee
import pytest

from templates_store import store
from templates_store.models import MODELS


@pytest.fixture
def db(tmp_path: Path) -> Iterator[peewee.SqliteDatabase]:
    database = peewee.SqliteDatabase(str(tmp_path / "t.db"), pragmas={"foreign_keys": 1})
    # Layang binds these models to its own database; give them back afterwards, or every later
    # test in the run would keep its templates in this file.
    previous = {model: model._meta.database for model in MODELS}
    database.bind(MODELS)
    database.connect()
    database.create_tables(MODELS)
    store.cache.clear()
    yield database
    store.cache.clear()
    database.close()
    for model, bound in previous.items():
        model.bind(bound)
