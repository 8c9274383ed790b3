"""The database: one proxy, initialised from a URL, so SQLite and PostgreSQL share one code path."""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import peewee
from playhouse.db_url import connect as connect_url

database = peewee.DatabaseProxy()

# WAL lets readers (the API) and the writer (a worker) proceed together; synchronous=FULL makes
# every commit durable against power loss, not only against a crashed process: an accepted
# message must survive both.
SQLITE_PRAGMAS = {
    "journal_mode": "wal",
    "synchronous": "full",
    "busy_timeout": 10000,
    "foreign_keys": 1,
    "cache_size": -16000,
}

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


def now_ms() -> int:
    """Current time as integer milliseconds since the epoch (how every timestamp is stored)."""
    return time.time_ns() // 1_000_000


def iso_ms(ms: int) -> str:
    """``2026-11-21T10:00:00.123Z`` for a timestamp in epoch milliseconds."""
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


_last_id = [0]
_id_lock = threading.Lock()


def new_id() -> str:
    """A 26-character, time-ordered, unguessable identifier (ULID layout, lowercase Crockford).

    Monotonic within a process: ids made in the same millisecond still sort in creation order,
    so "newest first" holds for the rows of one request.
    """
    candidate = (now_ms() << 80) | secrets.randbits(80)
    with _id_lock:
        value = max(candidate, _last_id[0] + 1)
        _last_id[0] = value
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_CROCKFORD[digit])
    return "".join(reversed(chars))


def open_database(url: str) -> peewee.Database:
    """Open the database named by ``url`` and bind the shared proxy to it.

    ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or ``postgresql://…``.
    """
    if url.startswith("sqlite:"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        db = connect_url(url, pragmas=SQLITE_PRAGMAS, check_same_thread=False)
    elif url.startswith(("postgres://", "postgresql://")):
        db = connect_url(url, autorollback=True)
    else:
        raise ValueError(f"unsupported database URL {url!r}: use sqlite:/// or postgresql://")
    database.initialize(db)
    return db


def is_postgresql() -> bool:
    return isinstance(database.obj, peewee.PostgresqlDatabase)


def write_transaction() -> AbstractContextManager[object]:
    """A transaction that takes the write lock up front.

    On SQLite a deferred transaction that reads then writes can fail with "database is locked"
    when another writer got in between; IMMEDIATE serialises writers at BEGIN instead.
    """
    db = database.obj
    if isinstance(db, peewee.SqliteDatabase):
        return db.atomic("IMMEDIATE")
    return db.atomic()


@functools.lru_cache(maxsize=256)
def _insert_sql(model: type[peewee.Model], fields: tuple[str, ...], rows: int, param: str) -> str:
    meta = model._meta
    columns = ", ".join(f'"{meta.fields[name].column_name}"' for name in fields)
    values = "(" + ", ".join([param] * len(fields)) + ")"
    # Only model metadata goes into the text; every value is a bound parameter.
    return f'INSERT INTO "{meta.table_name}" ({columns}) VALUES ' + ", ".join([values] * rows)  # noqa: S608


def insert_rows(
    model: type[peewee.Model], fields: tuple[str, ...], rows: Sequence[Sequence[object]]
) -> None:
    """Insert ``rows`` (values in ``fields`` order) with one cached SQL statement.

    On the intake path peewee spent more time building INSERT statements than the database
    spent running them; the statement text only depends on the table and the row count.
    Values must already be in their database form (ints, strings, bytes, None).
    """
    if not rows:
        return
    sql = _insert_sql(model, fields, len(rows), database.obj.param)
    database.execute_sql(sql, [value for row in rows for value in row])


class SchemaVersion(peewee.Model):
    version = peewee.IntegerField(primary_key=True)
    applied_at = peewee.BigIntegerField()

    class Meta:
        database = database
        table_name = "schema_version"


Migration = Callable[[peewee.Database], None]


def upgrade(migrations: Iterable[tuple[int, str, Migration]]) -> list[int]:
    """Apply every migration newer than the stored schema version, each in its own transaction.

    Safe to run concurrently from several processes and idempotent; returns the versions applied.
    """
    db = database.obj
    db.connect(reuse_if_open=True)
    SchemaVersion.create_table(safe=True)
    applied = []
    for version, _name, migrate in sorted(migrations, key=lambda m: m[0]):
        with write_transaction():
            if is_postgresql():
                db.execute_sql("SELECT pg_advisory_xact_lock(7411)")
            if SchemaVersion.get_or_none(SchemaVersion.version == version):
                continue
            migrate(db)
            SchemaVersion.create(version=version, applied_at=now_ms())
            applied.append(version)
    return applied


def current_version() -> int:
    """The newest applied schema version, 0 for an empty database."""
    if not SchemaVersion.table_exists():
        return 0
    return SchemaVersion.select(peewee.fn.MAX(SchemaVersion.version)).scalar() or 0
