"""The database: one proxy, initialised from a URL, so SQLite and PostgreSQL share one code path."""

from __future__ import annotations

import contextlib
import fcntl
import functools
import itertools
import logging
import os
import re
import select
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peewee
from playhouse.db_url import parse as parse_url

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

    def execute_prepared(
        self, name: str, sql: str, params: Sequence[object], before: str = ""
    ) -> Any:
        """Run ``sql`` (fixed text, ``%s`` placeholders) outside a transaction as the prepared
        statement ``name``, with its generic plan; returns the cursor. ``before`` (statements,
        each ending in ``;``) goes ahead of it in the same message, in the same implicit
        transaction.

        A statement on a partitioned table is planned over every partition, which can take
        longer than running it; prepared, it is planned once per connection. A prepared
        statement lives as long as its connection: it is prepared on this thread's connection
        the first time it runs there, and again on the next one after a reconnect. Raises what
        ``execute_sql`` raises.
        """
        self._replace_if_dead()
        conn = self.connection()
        held = getattr(self._state, "prepared", None)
        if held is None or held[0] is not conn:
            held = self._state.prepared = (conn, set())
        marks = ", ".join(["%s"] * len(params))
        run = f"{before} SET LOCAL plan_cache_mode TO force_generic_plan; EXECUTE {name}"
        run += f"({marks})" if params else ""
        for attempt in range(2):
            if name not in held[1]:
                try:
                    super().execute_sql(f"PREPARE {name} AS {_numbered(sql)}")
                except peewee.ProgrammingError as error:
                    if _pgcode(error) != "42P05":  # duplicate_prepared_statement
                        raise
                held[1].add(name)
            try:
                return super().execute_sql(run, params)
            except peewee.DatabaseError as error:
                # Gone from the session (DEALLOCATE or DISCARD by a connection pooler): the
                # failed EXECUTE's implicit transaction was rolled back, so prepare it again.
                held[1].discard(name)
                if _pgcode(error) != "26000" or attempt:  # invalid_sql_statement_name
                    raise
        raise AssertionError("unreachable")

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


def _numbered(sql: str) -> str:
    """``sql`` with its ``%s`` placeholders numbered, as PREPARE takes them: ``$1``, ``$2``…"""
    numbers = itertools.count(1)
    return re.sub("%s", lambda _: f"${next(numbers)}", sql)


def _pgcode(error: peewee.PeeweeException) -> str | None:
    """The SQLSTATE of the psycopg2 error peewee wrapped in ``error``, if any."""
    return getattr(getattr(error, "orig", None), "pgcode", None)


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
        path = url.split(":///", 1)[-1].split("?", 1)[0]
        if path and path != ":memory:":
            _create_owner_only(Path(path))
        params = parse_url(url)
        db: peewee.Database = SqliteDatabase(
            params.pop("database"), pragmas=SQLITE_PRAGMAS, check_same_thread=False, **params
        )
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


def _create_owner_only(path: Path) -> None:
    """Create the SQLite file (and its directory) readable by their owner only, unless they
    exist; SQLite gives its journal files the database file's permissions."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


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


class WriteLock:
    """One writer at a time to a SQLite file, among the threads and processes of this machine.

    SQLite makes a writer that finds the file locked poll: it sleeps 1, 2, 5, 10… ms between
    tries, while a write here holds the lock for a fraction of a millisecond. Under concurrent
    intake most of a request's time went to those sleeps. Writers queue on this lock first
    (a thread lock, then ``flock`` on ``<database>-writelock``), and the kernel wakes the next
    one the moment the previous one is done. Re-entrant within a thread.
    """

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        # A forked child shares the parent's open file, hence its flock: it opens its own.
        self._mutex = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    def __enter__(self) -> None:
        self._mutex.acquire()
        try:
            if self._depth == 0 and self._path is not None:
                if self._fd is None:
                    self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
        except BaseException:
            self._mutex.release()
            raise
        self._depth += 1

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._mutex.release()


# SQLite's primary result codes for "the disk said no": every write fails until an operator acts.
_SQLITE_STORAGE_ERRORS = (sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR)


def _storage_failure(error: BaseException) -> str | None:
    """The cause, when ``error`` (a peewee error or the sqlite3 one it wraps) says the storage
    refused a write; else None."""
    seen: BaseException | None = error
    while seen is not None:
        code = getattr(seen, "sqlite_errorcode", None)
        if code is not None and code & 0xFF in _SQLITE_STORAGE_ERRORS:
            return str(seen)
        inner = seen.args[0] if seen.args else None  # peewee wraps the driver's error
        if not isinstance(inner, BaseException):
            inner = seen.__cause__ or seen.__context__
        seen = inner
    return None


class WriteHealth:
    """Whether this process's writes to SQLite are failing for want of disk (or of a working
    one), for ``/healthz`` and ``/metrics``: one log line when an incident starts, one when it
    ends.

    A failure is reported for ``HOLD_SECONDS`` after the latest one unless a write commits
    meanwhile: a process that /healthz took out of rotation gets no writes to prove itself
    healthy with, so it comes back to be tried again.
    """

    HOLD_SECONDS = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cause: str | None = None
        self._since = 0.0
        self._latest = 0.0

    def failed(self, cause: str) -> None:
        now = time.monotonic()
        with self._lock:
            starts = self._cause is None
            self._cause, self._latest = cause, now
            if starts:
                self._since = now
        if starts:
            log.error("database writes are failing: %s", cause)

    def succeeded(self) -> None:
        if self._cause is None:  # the common case, without the lock
            return
        with self._lock:
            ended, self._cause = self._cause is not None, None
            lasted = time.monotonic() - self._since
        if ended:
            log.warning("database writes succeed again after %.0f s of failures", lasted)

    def failure(self) -> str | None:
        """The cause while writes are failing, else None."""
        with self._lock:
            if self._cause is not None and time.monotonic() - self._latest < self.HOLD_SECONDS:
                return self._cause
            return None


write_health = WriteHealth()


class SqliteDatabase(peewee.SqliteDatabase):
    """SQLite whose write transactions queue on a :class:`WriteLock` and begin IMMEDIATE, and
    whose storage failures reach the caller, the log and ``write_health`` intact."""

    def __init__(self, database: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(database, *args, **kwargs)
        in_memory = not database or database == ":memory:" or database.startswith("file::memory:")
        self.write_lock = WriteLock(None if in_memory else f"{database}-writelock")
        self.group_commit = GroupCommit(self)

    def _sqlite_in_transaction(self) -> bool:
        conn = self._state.conn
        return conn is not None and conn.in_transaction

    def execute_sql(self, sql: str, params: Any = None) -> Any:
        if sql.startswith("ROLLBACK TO SAVEPOINT") and not self._sqlite_in_transaction():
            return None  # see rollback()
        try:
            return super().execute_sql(sql, params)
        except peewee.DatabaseError as error:
            self._note(error)
            raise

    def begin(self, lock_type: str | None = None) -> None:
        super().begin(lock_type)
        self._state.changes_at_begin = self._state.conn.total_changes

    def commit(self) -> None:
        try:
            super().commit()
        except peewee.DatabaseError as error:
            self._note(error)
            raise
        if self._state.conn.total_changes != getattr(self._state, "changes_at_begin", None):
            write_health.succeeded()  # a write reached the disk, not only a read

    def rollback(self) -> None:
        # On SQLITE_FULL or an I/O error SQLite may roll the transaction back by itself; a
        # ROLLBACK then fails with "cannot rollback - no transaction is active", and that
        # error, raised while unwinding, would replace the one that says what went wrong.
        if self._state.conn is not None and not self._sqlite_in_transaction():
            return
        super().rollback()

    @staticmethod
    def _note(error: BaseException) -> None:
        cause = _storage_failure(error)
        if cause is not None:
            write_health.failed(cause)


@contextmanager
def write_transaction(db: peewee.Database | None = None, *, durable: bool = True) -> Iterator[None]:
    """A transaction that takes the write lock up front.

    On SQLite a deferred transaction that reads then writes fails at once with "database is
    locked" when another writer got in between (waiting cannot help: its snapshot is stale);
    IMMEDIATE serialises writers at BEGIN instead. Every write transaction that reads before
    it writes must use this, never a bare ``atomic()``. ``db`` defaults to the shared one.

    ``durable=False`` (outermost transactions only) commits without waiting for the disk: for
    bookkeeping that may be lost with the machine, such as a rate-limit count or a claim that
    matters only until the durable commit of the work it guards. Any later durable commit
    makes it durable too (the log is written in order).
    """
    if db is None or isinstance(db, peewee.DatabaseProxy):
        db = (db or database).obj
    if isinstance(db, peewee.SqliteDatabase):
        lock = db.write_lock if isinstance(db, SqliteDatabase) else contextlib.nullcontext()
        # In WAL mode, synchronous=NORMAL skips the commit's fsync; it is per connection.
        relaxed = not durable and not db.in_transaction()
        with lock:
            if relaxed:
                db.execute_sql("PRAGMA synchronous = NORMAL")
            try:
                with db.atomic("IMMEDIATE"):
                    yield
            finally:
                if relaxed:
                    db.execute_sql("PRAGMA synchronous = FULL")
    else:
        with db.atomic():
            if not durable and db.transaction_depth() == 1:
                db.execute_sql("SET LOCAL synchronous_commit TO OFF")
            yield


def write_relaxed(
    sql: str, params: Sequence[object], *, prepared: str | None = None
) -> tuple[list[tuple[Any, ...]], int]:
    """Run one writing statement (``?`` placeholders) committed without waiting for the disk,
    as ``write_transaction(durable=False)`` does; returns its rows and its row count.

    On PostgreSQL, outside a transaction, it goes with its ``SET LOCAL`` as one message, run
    as one implicit transaction: one round trip instead of four. There, ``prepared`` (an SQL
    name, for a statement run many times a minute, such as a queue's claim) runs it as that
    prepared statement, planned once per connection (``PostgresqlDatabase.execute_prepared``).
    """
    db = database.obj
    sql = sql.replace("?", db.param)
    if isinstance(db, peewee.PostgresqlDatabase) and not db.in_transaction():
        relaxed = "SET LOCAL synchronous_commit TO OFF;"
        if prepared and isinstance(db, PostgresqlDatabase):
            return _rows_and_count(db.execute_prepared(prepared, sql, params, before=relaxed))
        return _rows_and_count(database.execute_sql(f"{relaxed} {sql}", params))
    with write_transaction(durable=False):
        # Read before the commit: SQLite cannot commit while a RETURNING statement is unread.
        return _rows_and_count(database.execute_sql(sql, params))


def _rows_and_count(cursor: Any) -> tuple[list[tuple[Any, ...]], int]:
    rows = cursor.fetchall() if cursor.description else []
    count = cursor.rowcount
    cursor.close()
    return rows, count


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


@dataclass(frozen=True, slots=True)
class Statement:
    """A writing statement (``?`` placeholders) that joins ``insert_atomically`` beside its
    insert batches, for what a plain row insert cannot say (``INSERT … SELECT``)."""

    sql: str
    params: Sequence[object]

    def bound(self, param: str) -> str:
        return self.sql.replace("?", param)


@dataclass(frozen=True, slots=True)
class RowStream:
    """Rows inserted one statement each, each made only when it is inserted: for values too
    large to hold together or to send in one statement (a large message's payload, chunk by
    chunk). ``rows`` is called afresh each time the batch runs: a group commit may run a batch
    a second time."""

    model: type[peewee.Model]
    fields: tuple[str, ...]
    rows: Callable[[], Iterable[Sequence[object]]]


Batch = InsertBatch | Statement | RowStream


def insert_atomically(batches: Sequence[Batch]) -> None:
    """Insert several ``insert_rows`` batches all-or-nothing, durably committed on return.

    On PostgreSQL, outside a transaction, the statements go to the server as one message,
    which it runs as one implicit transaction: one round trip instead of BEGIN, each INSERT
    and COMMIT (it halved the intake path's time there); with a :class:`RowStream` among them
    they run one by one in a transaction instead, as psycopg2 would otherwise build the whole
    message, every value escaped, in memory. On SQLite, outside a transaction, they join the
    group commit of concurrent callers in this process (see ``GroupCommit``). Inside a
    transaction already open, they run one by one in a nested write transaction. A
    :class:`Statement` runs in its place among the batches.
    """
    batches = [batch for batch in batches if isinstance(batch, Statement | RowStream) or batch[2]]
    db = database.obj
    if not db.in_transaction():
        streamed = any(isinstance(batch, RowStream) for batch in batches)
        if isinstance(db, peewee.PostgresqlDatabase) and not streamed:
            statements, params = [], []
            for batch in batches:
                if isinstance(batch, Statement):
                    statements.append(batch.bound(db.param))
                    params.extend(batch.params)
                    continue
                model, fields, rows = batch
                statements.append(_insert_sql(model, fields, len(rows), db.param))
                params.extend(value for row in rows for value in row)
            database.execute_sql("; ".join(statements), params)
            return
        if isinstance(db, SqliteDatabase):
            db.group_commit.insert(batches)
            return
    with write_transaction():
        insert_batches(batches)


def insert_batches(batches: Sequence[Batch]) -> None:
    """Run ``batches`` one after another inside the caller's open write transaction."""
    for batch in batches:
        if isinstance(batch, Statement):
            database.execute_sql(batch.bound(database.obj.param), list(batch.params))
        elif isinstance(batch, RowStream):
            for row in batch.rows():
                insert_rows(batch.model, batch.fields, (row,))
        else:
            insert_rows(*batch)


class _Pending:
    __slots__ = ("batches", "done", "error")

    def __init__(self, batches: Sequence[Batch]) -> None:
        self.batches = batches
        self.done = False
        # Until the commit succeeds: should the leader be interrupted (a worker timeout
        # raising SystemExit), its followers must not take silence for success.
        self.error: BaseException | None = peewee.OperationalError("the group commit broke off")


LARGE_WRITE_CACHE_KIB = 1024
"""The page cache of a connection writing a large message (see ``GroupCommit``)."""


class GroupCommit:
    """Concurrent inserts of one process share one SQLite transaction, hence one fsync.

    With ``synchronous=FULL`` every commit waits for the disk, and commits to one file are
    serialised: one fsync per accepted message capped intake. Here the first caller to find
    no commit in progress becomes the leader: it takes every insert queued so far (its own
    included) and writes them in one IMMEDIATE transaction on its own connection; callers
    that arrive meanwhile wait, and one of them leads the next group. Every caller returns
    only once the transaction holding its rows is committed, so the durability of each is
    unchanged.

    If a group fails, each of its inserts is tried again alone, so a bad insert (a duplicate
    key) fails only its own caller; when the database itself is failing, each caller gets
    its own error. Either way nothing is half-stored.
    """

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._changed = threading.Condition(threading.Lock())
        self._queue: list[_Pending] = []
        self._committing = False

    def insert(self, batches: Sequence[Batch]) -> None:
        """Insert ``batches`` all-or-nothing; returns once they are committed, else raises
        what the database raised for them."""
        entry = _Pending(batches)
        with self._changed:
            self._queue.append(entry)
            while self._committing and not entry.done:
                self._changed.wait()
            leading = not entry.done
            if leading:
                self._committing = True
                group, self._queue = self._queue, []
        if leading:
            large = any(isinstance(b, RowStream) for member in group for b in member.batches)
            try:
                with self._small_cache() if large else contextlib.nullcontext():
                    self._commit(group)
            finally:
                with self._changed:
                    for member in group:
                        member.done = True
                    self._committing = False
                    self._changed.notify_all()
        if entry.error is not None:
            error, entry.error = entry.error, None
            raise error

    @contextmanager
    def _small_cache(self) -> Iterator[None]:
        # A large message's pages would fill this connection's page cache (cache_size): as
        # much memory again as a message up to that size, kept afterwards in each thread's
        # connection though this process never reads those pages again. While one is written
        # the cache is kept small (SQLite writes the pages past it to the WAL early), and it is
        # emptied afterwards. A failing statement here is the commit's to report.
        with contextlib.suppress(peewee.DatabaseError):
            self._db.execute_sql(f"PRAGMA cache_size = {-LARGE_WRITE_CACHE_KIB}")
        try:
            yield
        finally:
            with contextlib.suppress(peewee.DatabaseError):
                self._db.execute_sql("PRAGMA shrink_memory")
            with contextlib.suppress(peewee.DatabaseError):
                self._db.execute_sql(f"PRAGMA cache_size = {SQLITE_PRAGMAS['cache_size']}")

    def _commit(self, group: list[_Pending]) -> None:
        try:
            with write_transaction(self._db):
                for member in group:
                    insert_batches(member.batches)
        except Exception as error:
            if len(group) == 1:
                group[0].error = error
                return
            for member in group:
                try:
                    with write_transaction(self._db):
                        insert_batches(member.batches)
                except Exception as alone:
                    member.error = alone
                else:
                    member.error = None
        else:
            for member in group:
                member.error = None
