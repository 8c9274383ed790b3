"""``client.transmissions``: what became of a sent message."""

from __future__ import annotations

from typing import Any

from layang_client.resources.namespace import _Resource
from layang_client.transport import _path_segment


class Transmissions(_Resource):
    """``client.transmissions``: what became of a sent message."""

    def get(self, transmission_id: str) -> dict[str, Any]:
        """The transmission with every recipient's activity record, as the API returns it."""
        return self._client._json(
            "GET", f"/transmissions/{_path_segment(transmission_id)}", idempotent=True
        )
