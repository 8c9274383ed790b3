"""Activity events: the one place they are written.

Every step of an email's life that Activity shows (a delivery attempt's outcome, an open, a
click, a bounce report…) is stored through ``append_events``, inside the write transaction that
changes the recipient's record, so that whatever follows from an event is written with it or
not at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from layang.db import InsertBatch, insert_rows
from layang.models import Event

EVENT_FIELDS = ("recipient", "status", "created_at", "detail")

# (recipient id, status, epoch ms, detail as JSON)
EventRow = tuple[str, str, int, str]


def event_batches(rows: Sequence[EventRow]) -> list[InsertBatch]:
    """The inserts that store ``rows`` and what follows from them, for ``insert_atomically``
    (the intake path, which commits its rows in one go)."""
    return [(Event, EVENT_FIELDS, rows)] if rows else []


def append_events(rows: Sequence[EventRow]) -> None:
    """Store ``rows`` as activity events. Call it inside an open write transaction."""
    for model, fields, batch in event_batches(rows):
        insert_rows(model, fields, batch)
