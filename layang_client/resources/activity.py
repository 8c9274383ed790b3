"""``client.activity``: every email's delivery record, newest first."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

from layang_client.defaults import DEFAULT_PAGE_SIZE
from layang_client.payload import _timestamp
from layang_client.resources.namespace import _Resource


class Activity(_Resource):
    """``client.activity``: every email's delivery record, newest first."""

    def list(
        self,
        *,
        status: str | None = None,
        recipient: str | None = None,
        transmission_id: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        recipient_contains: str | None = None,
        tag: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Iterate over the matching records, newest first, fetching pages as needed.

        ``recipient`` is a whole address, ``recipient_contains`` part of one (as the console's
        search); ``tag`` one of the messages' tags (exact); ``status`` is one of Injection,
        Delay, Delivery, Bounce, Open, Click;
        ``since``/``until`` are datetimes (naive ones are UTC) or ISO 8601 strings.
        """
        params = {
            "status": status,
            "recipient": recipient,
            "recipientContains": recipient_contains,
            "transmissionId": transmission_id,
            "tag": tag,
            "since": None if since is None else _timestamp(since),
            "until": None if until is None else _timestamp(until),
        }
        return self._client._paginate("/activity", params, page_size)
