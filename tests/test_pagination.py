"""Keyset pagination over real rows in a SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import peewee
import pytest

from layang.pagination import Page, keyset_page


class Shelf(peewee.Model):
    name = peewee.CharField(unique=True)

    class Meta:
        database = None


class Book(peewee.Model):
    key = peewee.CharField(primary_key=True)
    shelf = peewee.ForeignKeyField(Shelf)
    title = peewee.CharField()

    class Meta:
        database = None


KEYS = ["b01", "b02", "b03", "b04", "b05", "b06", "b07"]


@pytest.fixture
def db(tmp_path: Path) -> Iterator[peewee.SqliteDatabase]:
    database = peewee.SqliteDatabase(str(tmp_path / "pages.db"))
    database.bind([Shelf, Book])
    database.connect()
    database.create_tables([Shelf, Book])
    shelves = [Shelf.create(name="odd"), Shelf.create(name="even")]
    # Inserted out of order: pages follow the key, not the insertion.
    for key in ["b04", "b01", "b07", "b03", "b06", "b02", "b05"]:
        Book.create(key=key, shelf=shelves[int(key[-1]) % 2 == 0], title=key.upper())
    yield database
    database.close()


def walk(query: peewee.Select, *, limit: int, descending: bool) -> list[Page]:
    pages, cursor = [], None
    while True:
        page = keyset_page(query, Book.key, limit=limit, cursor=cursor, descending=descending)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return pages


def keys(page: Page) -> list[str]:
    return [book.key for book in page.items]


def test_first_middle_and_last_page_descending(db: peewee.Database) -> None:
    first, middle, last = walk(Book.select(), limit=3, descending=True)
    assert keys(first) == ["b07", "b06", "b05"]
    assert first.next_cursor == "b05"
    assert keys(middle) == ["b04", "b03", "b02"]
    assert middle.next_cursor == "b02"
    assert keys(last) == ["b01"]
    assert last.next_cursor is None


def test_ascending(db: peewee.Database) -> None:
    pages = walk(Book.select(), limit=3, descending=False)
    assert [keys(p) for p in pages] == [["b01", "b02", "b03"], ["b04", "b05", "b06"], ["b07"]]
    assert [p.next_cursor for p in pages] == ["b03", "b06", None]


def test_a_full_last_page_has_no_next_cursor(db: peewee.Database) -> None:
    # limit + 1 rows are read: exactly `limit` rows left means no further page, not an empty one.
    pages = walk(Book.select(), limit=7, descending=True)
    assert len(pages) == 1
    assert keys(pages[0]) == list(reversed(KEYS))
    assert pages[0].next_cursor is None


def test_limit_one(db: peewee.Database) -> None:
    for descending in (True, False):
        pages = walk(Book.select(), limit=1, descending=descending)
        expected = list(reversed(KEYS)) if descending else KEYS
        assert [keys(p) for p in pages] == [[key] for key in expected]
        assert [p.next_cursor for p in pages] == [*expected[:-1], None]


def test_empty(db: peewee.Database) -> None:
    page = keyset_page(Book.select().where(Book.title == "none"), Book.key, limit=5)
    assert page == Page((), None)
    past_the_end = keyset_page(Book.select(), Book.key, limit=5, cursor="b01")
    assert past_the_end == Page((), None)


def test_filters_are_kept_and_ordering_and_limit_replaced(db: peewee.Database) -> None:
    query = (
        Book.select().join(Shelf).where(Shelf.name == "odd").order_by(Book.title.asc()).limit(100)
    )
    pages = walk(query, limit=2, descending=True)
    assert [keys(p) for p in pages] == [["b07", "b05"], ["b03", "b01"]]


def test_key_on_a_joined_model(db: peewee.Database) -> None:
    # Shelves with their books: the key, unique per row, lives on the joined model.
    query = Shelf.select(Shelf, Book).join(Book).where(Book.key > "b04")
    pages, cursor = [], None
    while True:
        page = keyset_page(query, Book.key, limit=2, cursor=cursor, key_of=lambda s: s.book.key)
        pages.append([(shelf.name, shelf.book.key) for shelf in page.items])
        if (cursor := page.next_cursor) is None:
            break
    assert pages == [[("odd", "b07"), ("even", "b06")], [("odd", "b05")]]


def test_map_converts_items_and_keeps_the_cursor(db: peewee.Database) -> None:
    page = keyset_page(Book.select(), Book.key, limit=2).map(lambda book: book.title)
    assert page == Page(("B07", "B06"), "b06")


def test_limit_below_one_is_refused(db: peewee.Database) -> None:
    with pytest.raises(ValueError):
        keyset_page(Book.select(), Book.key, limit=0)
