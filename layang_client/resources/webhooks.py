"""``client.webhooks``: endpoints that receive every event, and their delivery attempts."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from layang_client.defaults import DEFAULT_PAGE_SIZE
from layang_client.resources.namespace import _Resource
from layang_client.transport import _path_segment


class Webhooks(_Resource):
    """``client.webhooks``: endpoints that receive every event, and their delivery attempts."""

    _PATH = "/webhooks"

    def create(
        self, url: str, events: Iterable[str] = ("*",), *, description: str | None = None
    ) -> dict[str, Any]:
        """Add an endpoint for ``events`` (types such as ``"Delivery"``, or ``"*"``). The
        answer's ``secret`` is shown only here: keep it for :func:`verify_webhook`. Raises
        :class:`ValidationError` for a URL that is not https or names a non-public address."""
        body: dict[str, Any] = {"url": url, "events": list(events)}
        if description is not None:
            body["description"] = description
        return self._client._json("POST", self._PATH, json=body, idempotent=False)

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over the endpoints, newest first (never their secrets)."""
        return self._client._paginate(self._PATH, {}, page_size)

    def get(self, endpoint_id: str) -> dict[str, Any]:
        """One endpoint (never its secret)."""
        return self._client._json(
            "GET", f"{self._PATH}/{_path_segment(endpoint_id)}", idempotent=True
        )

    def update(
        self,
        endpoint_id: str,
        *,
        url: str | None = None,
        events: Iterable[str] | None = None,
        enabled: bool | None = None,
    ) -> dict[str, Any]:
        """Change what is given; ``enabled=False`` stops deliveries, ``True`` resumes them."""
        body: dict[str, Any] = {}
        if url is not None:
            body["url"] = url
        if events is not None:
            body["events"] = list(events)
        if enabled is not None:
            body["enabled"] = enabled
        return self._client._json(
            "PATCH", f"{self._PATH}/{_path_segment(endpoint_id)}", json=body, idempotent=True
        )

    def delete(self, endpoint_id: str) -> None:
        """Delete the endpoint and whatever it has not received yet."""
        self._client._request(
            "DELETE", f"{self._PATH}/{_path_segment(endpoint_id)}", idempotent=True
        )

    def rotate_secret(self, endpoint_id: str) -> dict[str, Any]:
        """A new ``secret`` (in the answer, shown only there); the old one signs too for 24 h."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(endpoint_id)}/rotate-secret", idempotent=False
        )

    def test(self, endpoint_id: str) -> str:
        """Queue a ``Test`` event to the endpoint; returns its event id."""
        answer = self._client._json(
            "POST", f"{self._PATH}/{_path_segment(endpoint_id)}/test", idempotent=False
        )
        return answer["eventId"]

    def deliveries(
        self, endpoint_id: str, *, page_size: int = DEFAULT_PAGE_SIZE
    ) -> Iterator[dict[str, Any]]:
        """Iterate over the endpoint's delivery attempts, newest first."""
        return self._client._paginate(
            f"{self._PATH}/{_path_segment(endpoint_id)}/deliveries", {}, page_size
        )
