"""``client.transmissions``: what became of a sent message."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from layang_client.payload import _timestamp
from layang_client.resources.namespace import _Resource
from layang_client.transport import _path_segment


class Transmissions(_Resource):
    """``client.transmissions``: what became of a sent message."""

    def get(self, transmission_id: str) -> dict[str, Any]:
        """The transmission with every recipient's activity record, as the API returns it."""
        return self._client._json(
            "GET", f"/transmissions/{_path_segment(transmission_id)}", idempotent=True
        )

    def cancel(self, transmission_id: str) -> dict[str, Any]:
        """Cancel a scheduled send before its time: its records become ``Cancelled`` and it is
        never sent. Returns the transmission; raises ``ConflictError`` (409) once sending
        started, ``NotFoundError`` for an unknown id."""
        path = f"/transmissions/{_path_segment(transmission_id)}/cancel"
        return self._client._json("POST", path, idempotent=True)

    def reschedule(self, transmission_id: str, scheduled_at: datetime | str) -> dict[str, Any]:
        """Move a scheduled send to ``scheduled_at`` (a datetime, naive ones UTC, or ISO 8601;
        at most 30 days ahead, a time past means now). Returns the transmission; raises
        ``ConflictError`` once sending started or when it was cancelled."""
        return self._client._json(
            "PATCH",
            f"/transmissions/{_path_segment(transmission_id)}",
            json={"scheduledAt": _timestamp(scheduled_at)},
            idempotent=True,
        )
