"""``client.inbound``: inbound routing, mail to your own domains posted to your endpoint:
``client.inbound.domains``, ``client.inbound.routes`` and ``client.inbound.messages``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from layang_client.defaults import DEFAULT_PAGE_SIZE
from layang_client.resources.namespace import Caller, _Resource
from layang_client.transport import _path_segment


class InboundDomains(_Resource):
    """``client.inbound.domains``: the domains whose mail this account receives."""

    _PATH = "/inbound/domains"

    def create(self, domain: str) -> dict[str, Any]:
        """Add ``domain`` (``pending``); the answer's ``records`` hold the MX to publish.
        Raises :class:`ConflictError` when added already or another account's."""
        return self._client._json("POST", self._PATH, json={"domain": domain}, idempotent=False)

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over the inbound domains, newest first."""
        return self._client._paginate(self._PATH, {}, page_size)

    def get(self, domain: str) -> dict[str, Any]:
        """One inbound domain, as of its last check."""
        return self._client._json("GET", f"{self._PATH}/{_path_segment(domain)}", idempotent=True)

    def verify(self, domain: str) -> dict[str, Any]:
        """Look its MX record up now; ``status`` turns ``verified`` once it names the host."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(domain)}/verify", idempotent=True
        )

    def delete(self, domain: str) -> None:
        """Delete the domain and its routes (mail received stays)."""
        self._client._request("DELETE", f"{self._PATH}/{_path_segment(domain)}", idempotent=True)


class InboundRoutes(_Resource):
    """``client.inbound.routes``: where each address's mail goes."""

    _PATH = "/inbound/routes"

    def create(
        self,
        match: str,
        action: str = "webhook",
        *,
        url: str | None = None,
        spam_threshold: float | None = None,
    ) -> dict[str, Any]:
        """Add a route (``match`` ``"support@in.example.com"`` or ``"*@in.example.com"``;
        ``action`` ``webhook``, ``hold`` or ``reject``). A webhook route's answer holds its
        ``secret``, shown only there: keep it for :func:`verify_webhook`."""
        body: dict[str, Any] = {"match": match, "action": action}
        if url is not None:
            body["url"] = url
        if spam_threshold is not None:
            body["spamThreshold"] = spam_threshold
        return self._client._json("POST", self._PATH, json=body, idempotent=False)

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over the routes, newest first (never their secrets)."""
        return self._client._paginate(self._PATH, {}, page_size)

    def get(self, route_id: str) -> dict[str, Any]:
        """One route (never its secret)."""
        return self._client._json("GET", f"{self._PATH}/{_path_segment(route_id)}", idempotent=True)

    def update(
        self, route_id: str, *, url: str | None = None, spam_threshold: float | None = None
    ) -> dict[str, Any]:
        """Change what is given: the URL (webhook routes) or the spam threshold."""
        body: dict[str, Any] = {}
        if url is not None:
            body["url"] = url
        if spam_threshold is not None:
            body["spamThreshold"] = spam_threshold
        return self._client._json(
            "PATCH", f"{self._PATH}/{_path_segment(route_id)}", json=body, idempotent=True
        )

    def rotate_secret(self, route_id: str) -> dict[str, Any]:
        """A new ``secret`` (in the answer only); the old one signs too for 24 h."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(route_id)}/rotate-secret", idempotent=False
        )

    def delete(self, route_id: str) -> None:
        """Delete the route (mail received stays)."""
        self._client._request("DELETE", f"{self._PATH}/{_path_segment(route_id)}", idempotent=True)


class InboundMessages(_Resource):
    """``client.inbound.messages``: the mail received, as posted, raw, and posted again."""

    _PATH = "/inbound/messages"

    def list(
        self,
        *,
        route: str | None = None,
        status: str | None = None,
        sender: str | None = None,
        recipient: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> Iterator[dict[str, Any]]:
        """Iterate over received mail, newest first, filtered by route, status (``held``,
        ``pending``, ``delivered``, ``failed``), envelope sender or recipient."""
        given = {"route": route, "status": status, "sender": sender, "recipient": recipient}
        params = {name: value for name, value in given.items() if value is not None}
        return self._client._paginate(self._PATH, params, page_size)

    def get(self, message_id: str) -> dict[str, Any]:
        """One message with every attempt to post it."""
        return self._client._json(
            "GET", f"{self._PATH}/{_path_segment(message_id)}", idempotent=True
        )

    def raw(self, message_id: str) -> bytes:
        """The message exactly as received."""
        path = f"{self._PATH}/{_path_segment(message_id)}/raw"
        return self._client._request("GET", path, idempotent=True).content

    def attachment(self, message_id: str, index: int) -> bytes:
        """The bytes of attachment ``index`` (from 0, as in the message's ``attachments``)."""
        path = f"{self._PATH}/{_path_segment(message_id)}/attachments/{int(index)}"
        return self._client._request("GET", path, idempotent=True).content

    def retry(self, message_id: str) -> dict[str, Any]:
        """Post the message to its route's endpoint again, now."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(message_id)}/retry", idempotent=False
        )


class Inbound:
    """``client.inbound``: ``domains``, ``routes`` and ``messages``."""

    def __init__(self, client: Caller) -> None:
        self.domains = InboundDomains(client)
        self.routes = InboundRoutes(client)
        self.messages = InboundMessages(client)
