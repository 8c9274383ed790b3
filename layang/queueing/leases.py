"""Work held under a lease: the one claim, renewal and hand-back statement of every queue.

A queue is a table whose rows are due while ``next_attempt_at`` is set and has passed, and held
by ``lease_owner`` while ``lease_expires_at`` lies in the future. Claiming sets the lease on up
to N due, free rows in one statement: on PostgreSQL concurrent claimers skip each other's locked
rows (``FOR UPDATE SKIP LOCKED``), on SQLite the statement holds the write lock. Either way no
row is handed to two live leases, and a holder that dies loses its rows once the lease runs out.

The statements are written once per table, backend and row count, as plain SQL: building them
with peewee's query builder cost more than running them. Leases are bookkeeping (a crash loses
them by design), so they commit without waiting for the disk.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from layang.clock import now_ms
from layang.db import is_postgresql, write_relaxed


@dataclass(frozen=True)
class LeasedTable:
    """A table held as a queue. ``returning`` are the columns a claim returns; ``eligible`` is
    an SQL condition a row must also meet to be claimed (fixed text, no parameters); ``order``
    which due rows are claimed first (fixed text).

    ``every_row`` (fixed text) is a condition every row of the table meets, added to the claim
    on PostgreSQL for the index it reads: when ``order`` starts with another column than
    ``next_attempt_at``, the index on ``order`` finds the due rows by their second column, and
    a scan of it reads past every row that is not due (the whole history of a partitioned
    table) unless the first column is held to a list of values (``"priority" IN (0, 1)``);
    then each value's scan ends at its last due row."""

    table: str
    returning: tuple[str, ...]
    eligible: str = ""
    order: str = '"next_attempt_at"'
    every_row: str = ""

    def claim(self, owner: str, limit: int, lease_seconds: float) -> list[tuple[Any, ...]]:
        """Lease up to ``limit`` due rows to ``owner``; returns their ``returning`` columns,
        in no particular order."""
        now = now_ms()
        postgresql = is_postgresql()
        due, lease = (now, now, limit), (owner, now + int(lease_seconds * 1000))
        rows, _ = write_relaxed(
            _claim_sql(self, postgresql),
            (*due, *lease) if postgresql else (*lease, *due),
            prepared=f"layang_claim_{self.table}",
        )
        return rows

    def claim_chosen(
        self, owner: str, ids: Sequence[str], lease_seconds: float
    ) -> list[tuple[Any, ...]]:
        """Lease to ``owner`` those of ``ids`` (chosen by the caller) still due and free;
        returns their ``returning`` columns."""
        if not ids:
            return []
        now = now_ms()
        marks = ", ".join(["?"] * len(ids))
        columns = ", ".join(f'"{column}"' for column in self.returning)
        rows, _ = write_relaxed(
            f'UPDATE "{self.table}" SET "lease_owner" = ?, "lease_expires_at" = ? '
            f'WHERE "id" IN ({marks}) AND "next_attempt_at" <= ? '
            f'AND ("lease_expires_at" IS NULL OR "lease_expires_at" < ?) RETURNING {columns}',
            [owner, now + int(lease_seconds * 1000), *ids, now, now],
        )
        return rows

    def renew(self, owner: str, ids: Sequence[str], lease_seconds: float) -> set[str]:
        """Extend ``owner``'s lease on those of ``ids`` it still holds; returns them."""
        if not ids:
            return set()
        marks = ", ".join(["?"] * len(ids))
        rows, _ = write_relaxed(
            f'UPDATE "{self.table}" SET "lease_expires_at" = ? WHERE "lease_owner" = ? '
            f'AND "next_attempt_at" IS NOT NULL AND "id" IN ({marks}) RETURNING "id"',
            [now_ms() + int(lease_seconds * 1000), owner, *ids],
        )
        return {row[0] for row in rows}

    def release(self, owner: str, ids: Sequence[str] | None = None) -> int:
        """Hand ``ids`` (default: every row ``owner`` holds) back to the queue at once, where
        ``owner`` still holds them; returns how many. Due again now, not once the lease ends."""
        if ids is not None and not ids:
            return 0
        which = "" if ids is None else f' AND "id" IN ({", ".join(["?"] * len(ids))})'
        _, count = write_relaxed(
            f'UPDATE "{self.table}" SET "lease_owner" = NULL, "lease_expires_at" = NULL '
            f'WHERE "lease_owner" = ?{which}',
            [owner, *(ids or ())],
        )
        return count


@functools.cache
def _claim_sql(queue: LeasedTable, postgresql: bool) -> str:
    eligible = f" AND {queue.eligible}" if queue.eligible else ""
    if postgresql and queue.every_row:
        eligible += f" AND {queue.every_row}"
    columns = ", ".join(f'"{column}"' for column in queue.returning)
    chosen = (
        f'SELECT "id" FROM "{queue.table}" WHERE "next_attempt_at" <= ? '
        f'AND ("lease_expires_at" IS NULL OR "lease_expires_at" < ?){eligible} '
        f"ORDER BY {queue.order} LIMIT ?"
    )
    if not postgresql:
        return (
            f'UPDATE "{queue.table}" SET "lease_owner" = ?, "lease_expires_at" = ? '
            f'WHERE "id" IN ({chosen}) RETURNING {columns}'
        )
    # PostgreSQL planned "id IN (subquery)" as a hash join over a scan of the whole table
    # (every record ever kept, not only the queue); "= ANY(ARRAY(subquery))" looks the chosen
    # rows up by key, whatever the table's size. The table is partitioned by "id": between the
    # least and the greatest chosen id, only the partitions holding them are read (pruned as
    # the statement runs), not every partition's key once per chosen row.
    return (
        f"WITH chosen AS MATERIALIZED ({chosen} FOR UPDATE SKIP LOCKED) "
        f'UPDATE "{queue.table}" SET "lease_owner" = ?, "lease_expires_at" = ? '
        'WHERE "id" = ANY(ARRAY(SELECT "id" FROM chosen)) '
        'AND "id" >= (SELECT min("id") FROM chosen) AND "id" <= (SELECT max("id") FROM chosen) '
        f"RETURNING {columns}"
    )
