"""The database: one proxy, initialised from a URL, so SQLite and PostgreSQL share one code path."""

from __future__ import annotations

import functools
import logging
import secrets
import select
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import peewee
from playhouse.db_url import connect as connect_url
from playhouse.db_url import parse as parse_url

from layang.clock import now_ms

try:
    import psycopg2
    from psycopg2 import extensions as psycopg2_extensions
except ImportError:  # PostgreSQL support is optional
    psycopg2 = psycopg2_extensions = None

log = logging.getLogger("layang.db")

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

# Fail fast instead of hanging on an unreachable server, and notice a peer that vanished without
# closing the connection (a crashed host, a dropped NAT entry). A URL's query string overrides.
POSTGRESQL_CONNECT_DEFAULTS: dict[str, Any] = {
    "connect_timeout": 5,
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}

# Errors that mean "the database cannot be reached or the connection broke", as peewee raises
# them for psycopg2 and sqlite3 alike, plus psycopg2's own: one raised while reading a result
# escapes peewee's wrapping and means the same. The one definition for every process.
UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = (peewee.OperationalError, peewee.InterfaceError)
if psycopg2 is not None:
    UNAVAILABLE_ERRORS += (psycopg2.OperationalError, psycopg2.InterfaceError)

_CROCKFORD = "0123456789abcdefghjkmnpqrstvwxyz"


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


class PostgresqlDatabase(peewee.PostgresqlDatabase):
    """PostgreSQL with one connection per thread that replaces itself once it has gone bad.

    After a server restart every open psycopg2 connection is dead, but nothing says so until a
    statement fails on it. Before a statement outside a transaction, and before BEGIN, this looks
    (without a round trip) whether the connection is still usable and opens a fresh one if not,
    so that the API, the workers and the SMTP server carry on by themselves once the server is
    back. COMMIT and ROLLBACK are never moved to a fresh connection: a transaction dies with its
    connection, and its COMMIT must fail rather than succeed on a connection that never saw it.
    """

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        if not self.in_transaction():
            self._replace_if_dead()
        return super().execute_sql(sql, params)

    def begin(self, isolation_level: Any = None) -> None:
        self._replace_if_dead()
        super().begin(isolation_level)

    def _replace_if_dead(self) -> None:
        if not self.is_closed() and not self.connection_alive():
            log.warning("database connection lost; reconnecting")
            self.dispose()

    def connection_alive(self) -> bool:
        """Whether the open, idle connection can still be used, judged without a round trip.

        An idle connection has nothing to read: if its socket is readable, the server has sent
        its goodbye (``terminating connection due to administrator command``) or closed it. A
        connection inside a transaction counts as alive: only a statement can tell.
        """
        conn = self._state.conn
        if conn is None or conn.closed:
            return False
        status = conn.get_transaction_status()
        if status == psycopg2_extensions.TRANSACTION_STATUS_UNKNOWN:
            return False
        if status != psycopg2_extensions.TRANSACTION_STATUS_IDLE:
            return True
        fd = conn.fileno()
        readable, _, _ = select.select([fd], [], [], 0) if fd < 1024 else _poll(fd)
        return not readable


def _poll(fd: int) -> tuple[list[int], list[int], list[int]]:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return [fd for fd, _ in poller.poll(0)], [], []


def open_database(url: str) -> peewee.Database:
    """Open the database named by ``url`` and bind the shared proxy to it.

    ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or ``postgresql://…``
    (``postgres://`` too; libpq parameters such as ``sslmode`` go in the query string).
    """
    if url.startswith("sqlite:"):
        path = url.split(":///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        db: peewee.Database = connect_url(url, pragmas=SQLITE_PRAGMAS, check_same_thread=False)
    elif url.startswith(("postgres://", "postgresql://")):
        params = {
            **POSTGRESQL_CONNECT_DEFAULTS,
            **parse_url(url, unquote_password=True, unquote_user=True),
        }
        if not params.get("database"):
            raise ValueError(f"database URL {url!r} names no database")
        db = PostgresqlDatabase(params.pop("database"), **params)
    else:
        raise ValueError(f"unsupported database URL {url!r}: use sqlite:/// or postgresql://")
    database.initialize(db)
    return db


def is_postgresql() -> bool:
    """Whether the shared database is PostgreSQL (else SQLite)."""
    return isinstance(database.obj, peewee.PostgresqlDatabase)


def discard_connection() -> None:
    """Drop this thread's connection after a database failure; the next statement reconnects.

    A connection that broke mid-transaction cannot be closed cleanly, so it is let go instead.
    """
    db = database.obj
    if db is None:
        return
    try:
        db.close()
    except peewee.PeeweeException:
        db.dispose()


def error_summary(error: BaseException) -> str:
    """A driver error on one line (psycopg2's messages span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def close_before_fork() -> None:
    """Close this process's connection so that no child process inherits it."""
    if database.obj is not None and not database.obj.is_closed():
        discard_connection()


def forget_inherited_connection() -> None:
    """In a freshly forked child: never use a connection the parent opened.

    Its socket is shared with the parent, so the child drops its reference without closing it
    (closing would end the parent's session); the child's first statement opens its own.
    """
    if database.obj is not None and not database.obj.is_closed():
        _inherited.append(database.obj.connection())
        database.obj.dispose()


# Connections a child inherited across fork, kept referenced so it never closes them.
_inherited: list[object] = []


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


InsertBatch = tuple[type[peewee.Model], tuple[str, ...], Sequence[Sequence[object]]]


def insert_atomically(batches: Sequence[InsertBatch]) -> None:
    """Insert several ``insert_rows`` batches all-or-nothing, durably committed on return.

    On PostgreSQL, outside a transaction, the statements go to the server as one message,
    which it runs as one implicit transaction: one round trip instead of BEGIN, each INSERT
    and COMMIT (it halved the intake path's time there). Elsewhere, or inside a transaction
    already open, they run one by one in a (nested) write transaction.
    """
    batches = [batch for batch in batches if batch[2]]
    db = database.obj
    if isinstance(db, peewee.PostgresqlDatabase) and not db.in_transaction():
        statements, params = [], []
        for model, fields, rows in batches:
            statements.append(_insert_sql(model, fields, len(rows), db.param))
            params.extend(value for row in rows for value in row)
        database.execute_sql("; ".join(statements), params)
        return
    with write_transaction():
        for model, fields, rows in batches:
            insert_rows(model, fields, rows)
