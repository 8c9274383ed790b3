"""Keyset ("cursor") pagination of peewee queries: every listing pages the same way.

A page ends at a row's key and the next page starts strictly after it, so rows inserted or
deleted meanwhile never shift a page (as ``OFFSET`` would) and deep pages cost no more than the
first. No web framework here: the template store pages with it too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import peewee

T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of a listing; ``next_cursor`` is ``None`` on the last page."""

    items: tuple[T, ...]
    next_cursor: str | None

    def map(self, convert: Callable[[T], U]) -> Page[U]:
        """The same page with every item converted, e.g. rows to records."""
        return Page(tuple(convert(item) for item in self.items), self.next_cursor)


def keyset_page(
    query: peewee.Select,
    key: peewee.Field,
    *,
    limit: int,
    cursor: str | None = None,
    descending: bool = True,
    key_of: Callable[[Any], Any] | None = None,
) -> Page[Any]:
    """The page of ``query`` ordered by ``key`` that starts after ``cursor`` (from the start
    when ``None`` or empty), at most ``limit`` rows.

    ``key`` must be unique among the rows of ``query`` (a primary key, or an id unique per
    account), or rows sharing a key across a page boundary would be skipped. The query's own
    ordering and limit are replaced. ``key_of`` reads the key from a row when it is not the
    row's attribute of the key's name (a key on a joined model). Raises ``ValueError`` when
    ``limit`` is below 1.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if cursor:
        query = query.where(key < cursor if descending else key > cursor)
    # One row more than asked tells whether another page follows, without a COUNT.
    rows = list(query.order_by(key.desc() if descending else key.asc()).limit(limit + 1))
    next_cursor = None
    if len(rows) > limit:
        last = rows[limit - 1]
        next_cursor = str(key_of(last) if key_of is not None else getattr(last, key.name))
    return Page(tuple(rows[:limit]), next_cursor)
