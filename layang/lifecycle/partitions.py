"""The history tables' weekly partitions on PostgreSQL (migration 34): made ahead by the workers,
dropped whole by retention once their last day is past the horizon.

A table's partitions are ``<table>_history`` (everything before migration 34's cut),
``<table>_pYYYYMMDD`` (one week each, Monday 00:00 UTC to the next, named by its Monday) and
``<table>_default`` (rows outside every range, e.g. from a clock far off; aged row by row, never
dropped). Weeks rather than days: every statement on a partitioned table is planned over its
partitions, and the claim of the delivery queue, planned hundreds of times a minute, took
milliseconds more with the 55 daily partitions of 45 days than with the 10 weekly ones. The
partitions of one week of every table share a range, so they go together, in groups whose rows
refer only to each other:

- mail: ``event`` (by record) then ``recipient``; kept while the week holds a record still
  queued or scheduled (``next_attempt_at`` or ``scheduled_at`` set): mail still queued is never
  removed;
- content: ``transmission_tag``, ``payload_chunk`` (by message) then ``transmission``; kept while
  any record, in any partition, still belongs to one of the week's messages;
- webhook deliveries: ``webhook_attempt`` (by delivery) then ``webhook_delivery``; kept while one
  of the week's deliveries is pending;
- webhook events: ``webhook_event`` (by when stored); kept while one of them is in no delivery
  yet or in a pending one.

A partition is detached and dropped in one transaction that first checks, under the detach's
lock, that it still holds nothing kept; a week that does is left for retention's row-by-row
deletes (``layang.lifecycle.retention``) and dropped on a later run once its last kept row is final.
On SQLite every function here does nothing.
"""

from __future__ import annotations

import datetime
import logging
import re
from dataclasses import dataclass

import peewee

from layang.clock import now_ms
from layang.db import database, is_postgresql, write_transaction
from layang.ids import id_floor, id_ms

log = logging.getLogger("layang.partitions")

DAY_MS = 86_400_000
WEEK_MS = 7 * DAY_MS
MONDAY_MS = 4 * DAY_MS
"""1970-01-05, the first Monday after the epoch: weeks start on Mondays at 00:00 UTC."""
AHEAD_DAYS = 14
"""The workers keep made the partitions of every week that begins within this many days."""
LOCK_TIMEOUT = "1s"
"""How long making or dropping a partition waits for the tables' locks before leaving it to the
next run (it waits for running statements on the table; statements wait behind it)."""
_LOCK = 7412
"""Advisory lock: one process at a time makes or drops partitions."""


@dataclass(frozen=True, slots=True)
class Table:
    """A partitioned table: its name, its partition key, and whether the key is epoch ms
    (else a time-ordered id)."""

    name: str
    key: str
    by_time: bool = False


MAIL = (Table("event", "recipient_id"), Table("recipient", "id"))
CONTENT = (
    Table("transmission_tag", "transmission_id"),
    Table("payload_chunk", "transmission_id"),
    Table("transmission", "id"),
)
WEBHOOK_DELIVERIES = (Table("webhook_attempt", "delivery_id"), Table("webhook_delivery", "id"))
WEBHOOK_EVENTS = (Table("webhook_event", "created_at", by_time=True),)
TABLES = (*CONTENT, *MAIL, *WEBHOOK_DELIVERIES, *WEBHOOK_EVENTS)


@dataclass(frozen=True, slots=True)
class Partition:
    """One range partition: its table, name, and range in epoch ms (``low`` None: MINVALUE)."""

    table: str
    name: str
    low: int | None
    high: int


@dataclass(slots=True)
class Dropped:
    """Rows that went with the partitions a call dropped, per kind, and the partitions' names."""

    records: int = 0
    events: int = 0
    messages: int = 0
    webhook_deliveries: int = 0
    partitions: tuple[str, ...] = ()


def partitioned() -> bool:
    """Whether the database's history tables are partitioned (PostgreSQL after migration 34)."""
    if not is_postgresql():
        return False
    row = database.execute_sql(
        "SELECT c.relkind FROM pg_class c WHERE c.relname = 'recipient' "
        "AND c.relnamespace = current_schema()::regnamespace"
    ).fetchone()
    return row is not None and row[0] == "p"


_BOUND = re.compile(r"FROM \((.+?)\) TO \((.+?)\)")


def partitions() -> list[Partition]:
    """Every range partition of the history tables (not the default ones), oldest first."""
    rows = database.execute_sql(
        "SELECT p.relname, c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i "
        "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent "
        "WHERE p.relnamespace = current_schema()::regnamespace AND p.relname = ANY(%s)",
        ([t.name for t in TABLES],),
    ).fetchall()
    found = []
    for table, name, bound in rows:
        match = _BOUND.search(bound)
        if match is None:
            continue  # DEFAULT
        found.append(Partition(table, name, _bound_ms(match.group(1)), _bound_ms(match.group(2))))
    return sorted(found, key=lambda p: (p.high, p.table))


def _bound_ms(text: str) -> int | None:
    if text == "MINVALUE":
        return None
    value = text.strip("'")
    return int(value) if value.isdigit() and len(value) != 26 else id_ms(value)


def _literal(table: Table, at_ms: int) -> str:
    return str(at_ms) if table.by_time else f"'{id_floor(at_ms)}'"


def _key(table: Table, at_ms: int) -> int | str:
    return at_ms if table.by_time else id_floor(at_ms)


def week_of(at_ms: int) -> int:
    """The start (epoch ms, Monday 00:00 UTC) of the partition week holding ``at_ms``."""
    return (at_ms - MONDAY_MS) // WEEK_MS * WEEK_MS + MONDAY_MS


def _name(table: Table, week: int) -> str:
    monday = datetime.datetime.fromtimestamp(week / 1000, datetime.UTC)
    return f"{table.name}_p{monday:%Y%m%d}"


def make_ahead(now: int | None = None, days: int = AHEAD_DAYS) -> list[str]:
    """Make each history table's weekly partitions from the end of its last one up to the week
    that begins within ``days`` of ``now`` (epoch ms; default the current time); returns the
    names made. Idempotent, and safe from several workers at once (they take turns; what one
    made, the next finds). A week for which the default partition already holds rows is left to
    it (logged): its rows are then aged row by row. Nothing on SQLite or an unpartitioned
    database."""
    now = now_ms() if now is None else now
    return make_weeks(None, week_of(now + days * DAY_MS), this_week=week_of(now))


def make_weeks(first: int | None, last: int, *, this_week: int | None = None) -> list[str]:
    """Make each history table's partitions for the weeks starting ``first`` to ``last`` (epoch
    ms, as :func:`week_of` gives) that no partition covers yet; ``first`` None: from the end of
    the table's last partition (``this_week`` when it has none). Returns the names made. As
    :func:`make_ahead` (which calls it); also for a database being filled with history."""
    if not partitioned():
        return []
    made: list[str] = []
    with write_transaction(durable=False):
        database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
        database.execute_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
        existing = partitions()
        for table in TABLES:
            own = [p for p in existing if p.table == table.name]
            if first is not None:
                week = first
            else:
                week = max((p.high for p in own), default=this_week or last)
            while week <= last:
                covered = any((p.low is None or p.low <= week) and week < p.high for p in own)
                if not covered and _make(table, _name(table, week), week):
                    made.append(_name(table, week))
                week += WEEK_MS
    if made:
        log.info("partitions made: %s", " ".join(made))
    return made


def _make(table: Table, name: str, week: int) -> bool:
    crowded = database.execute_sql(
        f'SELECT 1 FROM "{table.name}_default" WHERE "{table.key}" >= %s '  # noqa: S608 - names only
        f'AND "{table.key}" < %s LIMIT 1',
        (_key(table, week), _key(table, week + WEEK_MS)),
    ).fetchone()
    if crowded:
        log.warning("partition %s not made: %s_default holds rows of its week", name, table.name)
        return False
    # Made apart then attached: attaching locks the parent less than CREATE … PARTITION OF.
    database.execute_sql(f'CREATE TABLE "{name}" (LIKE "{table.name}" INCLUDING DEFAULTS)')
    database.execute_sql(
        f'ALTER TABLE "{table.name}" ATTACH PARTITION "{name}" '
        f"FOR VALUES FROM ({_literal(table, week)}) TO ({_literal(table, week + WEEK_MS)})"
    )
    return True


# What keeps a week's group: a query on the week's partitions, true while anything must stay.
_KEPT = {
    "recipient": 'SELECT 1 FROM "{recipient}" WHERE "next_attempt_at" IS NOT NULL '
    'OR "scheduled_at" IS NOT NULL LIMIT 1',
    "transmission": 'SELECT 1 FROM "recipient" WHERE "transmission_id" >= %s '
    'AND "transmission_id" < %s LIMIT 1',
    "webhook_delivery": 'SELECT 1 FROM "{webhook_delivery}" WHERE "status" = \'pending\' LIMIT 1',
    "webhook_event": 'SELECT 1 FROM "{webhook_event}" WHERE "delivery_id" IS NULL '
    'UNION ALL SELECT 1 FROM "webhook_delivery" d WHERE d."status" = \'pending\' '
    'AND EXISTS (SELECT 1 FROM "{webhook_event}" e WHERE e."delivery_id" = d."id") LIMIT 1',
}
# Which count of ``Dropped`` a table's rows add to.
_COUNTED = {
    "recipient": "records",
    "event": "events",
    "transmission": "messages",
    "webhook_delivery": "webhook_deliveries",
}


def drop_before(horizon: int) -> Dropped:
    """Detach and drop every group of partitions whose range ends at or before ``horizon``
    (epoch ms) and that holds nothing kept (see the module's docstring); returns what went.
    Safe from several processes at once; a group whose locks are not had within
    ``LOCK_TIMEOUT`` waits for the next run. Nothing on SQLite."""
    dropped = Dropped()
    if not partitioned():
        return dropped
    names: list[str] = []
    for group in (MAIL, CONTENT, WEBHOOK_DELIVERIES, WEBHOOK_EVENTS):
        main = group[-1]
        days = [p for p in partitions() if p.table == main.name and p.high <= horizon]
        for day in days:
            try:
                went = _drop_group(group, day)
            except peewee.OperationalError as error:  # a lock not had in time
                log.warning("partitions of %s left for later: %s", day.name, error)
                continue
            for table, count in went.items():
                if table in _COUNTED:
                    name = _COUNTED[table]
                    setattr(dropped, name, getattr(dropped, name) + count)
            names.extend(f"{table}{day.name[len(main.name) :]}" for table in went)
    dropped.partitions = tuple(names)
    if names:
        log.info("partitions dropped: %s", " ".join(names))
    return dropped


class _Kept(Exception):
    """Something in a week's partitions must stay after all: the transaction is rolled back."""


def _drop_group(group: tuple[Table, ...], day: Partition) -> dict[str, int]:
    """Drop the week's partitions of ``group`` (last table: the one ``day`` is of) unless
    something in them is kept; returns the rows each held ({} when kept)."""
    main = group[-1]
    suffix = day.name[len(main.name) :]
    present = {p.name for p in partitions()}
    members = [t for t in group if f"{t.name}{suffix}" in present]
    kept = _KEPT[main.name].format(**{t.name: f"{t.name}{suffix}" for t in group})
    params = (id_floor(day.low or 0), id_floor(day.high)) if main.name == "transmission" else None
    if database.execute_sql(kept, params).fetchone():
        return {}
    # Counted before the locks are taken, so that they are held only while detaching.
    went = {}
    for table in members:
        count = f'SELECT count(*) FROM "{table.name}{suffix}"'  # noqa: S608 - names only
        went[table.name] = database.execute_sql(count).fetchone()[0]
    try:
        with write_transaction(durable=False):
            database.execute_sql("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            database.execute_sql(f"SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'")
            # The parents in the order the code writes them (a message, its records, their
            # events), so that waiting for a writer never deadlocks with it.
            parents = ", ".join(f'ONLY "{t.name}"' for t in reversed(members))
            database.execute_sql(f"LOCK TABLE {parents} IN ACCESS EXCLUSIVE MODE")
            for table in members:
                database.execute_sql(
                    f'ALTER TABLE "{table.name}" DETACH PARTITION "{table.name}{suffix}"'
                )
            # Checked again under the lock: nothing can have become queued since.
            if database.execute_sql(kept, params).fetchone():
                raise _Kept
            for table in members:
                database.execute_sql(f'DROP TABLE "{table.name}{suffix}"')
    except _Kept:
        return {}
    return went
