"""Engagement: the Open and Click events recorded when a tracking URL is fetched.

Repeats are counted, not stored one by one: a mail client that refetches its images, a
preview pane or a script replaying a pixel would otherwise add an event per request (13,000
in 20 seconds were measured on one record). Within ``REPEAT_WINDOW_MS`` of an Open event,
further opens of the same record only raise that event's ``count`` and move its ``lastAt``;
the same holds for clicks, per clicked URL. After the window a new event starts, so a record
keeps at most one Open event per window and one Click event per window and link.

Tracking links expire ``LAYANG_TRACKING_TOKEN_DAYS`` after they were made, so that a link minted
once is not a redirect from this service's domain for ever. A token made before tokens carried
their issue time is dated by its record's creation (the message's acceptance, just before the
links were made), so it keeps working exactly until a new token of the same mail would expire.
Nothing is recorded for an expired link. Links in mail of a sandbox account are never
redirected (the page shows where they lead): otherwise any sandbox account, sending to itself,
could mint redirects to anywhere.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from layang.clock import iso_ms, now_ms
from layang.db import is_postgresql, write_transaction
from layang.mail.events import append_events
from layang.mail.tracking import InvalidToken, TrackingToken
from layang.models import CLICK, OPEN, SANDBOX, Account, Event, Recipient

_USER_AGENT_MAX = 512
REPEAT_WINDOW_MS = 60 * 60 * 1000


@dataclass(frozen=True, slots=True)
class Engagement:
    """What following a tracking link did: ``expired`` (nothing recorded), ``sandbox`` (the mail
    came from a sandbox account: show the destination, never redirect)."""

    expired: bool
    sandbox: bool


class RecordRemoved(InvalidToken):
    """The token is ours, but retention or an erasure removed its record since."""


def follow_tracking_link(
    token: TrackingToken, status: str, detail: dict[str, object], *, max_age_ms: int
) -> Engagement:
    """Record an Open or Click for ``token`` unless it is older than ``max_age_ms``. Raises
    ``RecordRemoved`` (an ``InvalidToken``) if its record no longer exists."""
    row = (
        Recipient.select(Recipient.created_at, Account.mode)
        .join(Account)
        .where(Recipient.id == token.recipient_id)
        .tuples()
        .first()
    )
    if row is None:
        raise RecordRemoved(token.recipient_id)
    created_at, mode = row
    issued = token.issued_at_ms if token.issued_at_ms is not None else created_at
    expired = now_ms() - issued > max_age_ms
    if not expired:
        record_engagement(token.recipient_id, status, detail)
    return Engagement(expired=expired, sandbox=mode == SANDBOX)


def record_engagement(recipient_id: str, status: str, detail: dict[str, object]) -> None:
    """Record an Open or Click on the recipient's record. Raises ``InvalidToken`` if the record
    no longer exists.

    A new event is stored unless one of the same kind (for a click: of the same ``url``) began
    less than ``REPEAT_WINDOW_MS`` ago; then that event's detail gets ``count`` (how many
    fetches it stands for) and ``lastAt`` (ISO 8601 of the latest) instead. Its ``userAgent``
    stays the first one's. The first Open event of a record is marked ``first: true``.
    """
    if status not in (OPEN, CLICK):
        raise ValueError(status)
    agent = detail.get("userAgent")
    if isinstance(agent, str):
        detail["userAgent"] = agent[:_USER_AGENT_MAX]
    now = now_ms()
    with write_transaction():
        # Concurrent fetches of one record read and update the same event: on PostgreSQL each
        # waits for the record's row lock, so none reads a count another is about to raise (on
        # SQLite the write transaction already runs alone).
        record = Recipient.select(Recipient.id).where(Recipient.id == recipient_id)
        if is_postgresql():
            record = record.for_update()
        if record.first() is None:
            raise RecordRemoved(recipient_id)
        recent = (
            Event.select(Event.id, Event.detail)
            .where(
                (Event.recipient == recipient_id)
                & (Event.status == status)
                & (Event.created_at > now - REPEAT_WINDOW_MS)
            )
            .order_by(Event.id.desc())
        )
        for event in recent:
            stored = json.loads(event.detail)
            if status == CLICK and stored.get("url") != detail.get("url"):
                continue
            stored["count"] = int(stored.get("count", 1)) + 1
            stored["lastAt"] = iso_ms(now)
            Event.update(detail=json.dumps(stored)).where(Event.id == event.id).execute()
            break
        else:
            if status == OPEN:
                earlier = Event.select(Event.id).where(
                    (Event.recipient == recipient_id) & (Event.status == OPEN)
                )
                detail["first"] = not earlier.exists()
            append_events([(recipient_id, status, now, json.dumps(detail))])
        Recipient.update(updated_at=now).where(Recipient.id == recipient_id).execute()
