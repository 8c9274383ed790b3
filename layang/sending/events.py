"""Activity events: the one place they are written.

Every step of an email's life that Activity shows (a delivery attempt's outcome, an open, a
click, a bounce report…) is stored through ``append_events``, inside the write transaction that
changes the recipient's record, so that whatever follows from an event is written with it or
not at all.
"""

from __future__ import annotations

from collections.abc import Sequence

from layang.db import Batch, insert_batches
from layang.models import Event
from layang.sending.suppression import suppressions_from

EVENT_FIELDS = ("recipient", "status", "created_at", "detail")

# (recipient id, status, epoch ms, detail as JSON)
EventRow = tuple[str, str, int, str]


def event_batches(rows: Sequence[EventRow]) -> list[Batch]:
    """The inserts that store ``rows`` and what follows from them, for ``insert_atomically``
    (the intake path, which commits its rows in one go)."""
    if not rows:
        return []
    batches: list[Batch] = [(Event, EVENT_FIELDS, rows)]
    # A hard bounce, a complaint or an unsubscribe puts the address on the suppression list.
    suppressions = suppressions_from(rows)
    if suppressions is not None:
        batches.append(suppressions)
    return batches


def append_events(rows: Sequence[EventRow]) -> None:
    """Store ``rows`` as activity events. Call it inside an open write transaction."""
    insert_batches(event_batches(rows))
