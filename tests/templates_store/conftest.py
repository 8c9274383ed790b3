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
    # bind_ctx gives the models back to the application's database afterwards: later tests
    # would otherwise read and write templates in this one.
    with database.bind_ctx(MODELS):
        database.connect()
        database.create_tables(MODELS)
        store.cache.clear()
        yield database
        store.cache.clear()
        database.close()
