"""The model every table derives from, bound to the one database proxy of ``layang.db``."""

from __future__ import annotations

import peewee

from layang.db import database


class BaseModel(peewee.Model):
    class Meta:
        database = database
        legacy_table_names = False
