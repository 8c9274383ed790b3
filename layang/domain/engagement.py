"""Engagement: the Open and Click events recorded when a tracking URL is fetched."""

from __future__ import annotations

import json

from layang.clock import now_ms
from layang.db import write_transaction
from layang.models import CLICK, OPEN, Event, Recipient
from layang.sending.tracking import InvalidToken

_USER_AGENT_MAX = 512


def record_engagement(recipient_id: str, status: str, detail: dict[str, object]) -> None:
    """Append an Open or Click event to the recipient's record. Raises ``InvalidToken`` if the
    record no longer exists. The first open is marked ``first: true``."""
    if status not in (OPEN, CLICK):
        raise ValueError(status)
    agent = detail.get("userAgent")
    if isinstance(agent, str):
        detail["userAgent"] = agent[:_USER_AGENT_MAX]
    now = now_ms()
    with write_transaction():
        if not Recipient.select(Recipient.id).where(Recipient.id == recipient_id).exists():
            raise InvalidToken(recipient_id)
        if status == OPEN:
            earlier = Event.select(Event.id).where(
                (Event.recipient == recipient_id) & (Event.status == OPEN)
            )
            detail["first"] = not earlier.exists()
        Event.insert(
            recipient=recipient_id, status=status, created_at=now, detail=json.dumps(detail)
        ).execute()
        Recipient.update(updated_at=now).where(Recipient.id == recipient_id).execute()
