"""``client.transmissions``: what became of a sent message."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from layang_client.payload import _timestamp
from layang_client.resources.namespace import _Resource
from layang_client.transport import IDEMPOTENCY_HEADER, _path_segment


class Transmissions(_Resource):
    """``client.transmissions``: what became of a sent message."""

    def get(self, transmission_id: str) -> dict[str, Any]:
        """The transmission with every recipient's activity record, as the API returns it."""
        return self._client._json(
            "GET", f"/transmissions/{_path_segment(transmission_id)}", idempotent=True
        )

    def batch(self, messages: list[dict[str, Any]], *, idempotency_key: str | None = None
              ) -> list[dict[str, Any]]:  # fmt: skip
        """Send up to 500 messages in one request, each the API's JSON body of a send (the
        camelCase fields: ``{"from", "to", "subject", "bodyText", …}``). Returns one result
        per message, in order: ``{"transmissionId"}`` or the error body that refused it alone
        (``{"error", "message", "status", "errors"?}``); no exception for those. A key is made
        for the call when ``idempotency_key`` is None, so its retries never send twice."""
        key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
        answer = self._client._json(
            "POST",
            "/transmissions/batch",
            json={"messages": list(messages)},
            headers={IDEMPOTENCY_HEADER: key},
            idempotent=True,
        )
        return list(answer["results"])

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
