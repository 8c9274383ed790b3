"""What every ``client.<namespace>`` holds: the client whose calls it makes."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from layang_client.client import Layang


class _Resource:
    def __init__(self, client: Layang) -> None:
        self._client = client
