"""What every ``client.<namespace>`` holds: the client whose calls it makes."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

import httpx


class Caller(Protocol):
    """What a namespace asks of the client (:class:`layang_client.client.Layang`): one API call
    with the retry policy, its JSON, and the pages of a list."""

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool,
    ) -> httpx.Response: ...

    def _json(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool,
    ) -> Any: ...

    def _paginate(
        self, path: str, params: Mapping[str, Any], page_size: int
    ) -> Iterator[dict[str, Any]]: ...


class _Resource:
    def __init__(self, client: Caller) -> None:
        self._client = client
