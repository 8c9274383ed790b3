"""``client.tracking_domains``: your own domains for tracked links and the open pixel."""

from __future__ import annotations

from typing import Any

from layang_client.resources.namespace import _Resource
from layang_client.transport import _path_segment


class TrackingDomains(_Resource):
    """``client.tracking_domains``: your own domains for tracked links and the open pixel,
    each a CNAME to the service (its ``records``), verified in DNS."""

    _PATH = "/tracking-domains"

    def create(self, domain: str) -> dict[str, Any]:
        """Add a domain; it starts ``pending`` and lists the CNAME to publish (``records``).
        Raises :class:`ConflictError` if it is added already."""
        return self._client._json("POST", self._PATH, json={"domain": domain}, idempotent=False)

    def list(self) -> list[dict[str, Any]]:
        """The tracking domains, by name."""
        return list(self._client._json("GET", self._PATH, idempotent=True)["items"])

    def get(self, domain: str) -> dict[str, Any]:
        """One tracking domain, as of its last check."""
        return self._client._json("GET", f"{self._PATH}/{_path_segment(domain)}", idempotent=True)

    def verify(self, domain: str) -> dict[str, Any]:
        """Look the CNAME up now: ``{"domain", "status": "verified" | "pending", "records",
        "found"}``. Once verified, tracked links and the pixel use ``https://<domain>/``."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(domain)}/verify", idempotent=True
        )

    def delete(self, domain: str) -> None:
        """Remove the domain: new links use the service's host again."""
        self._client._request("DELETE", f"{self._PATH}/{_path_segment(domain)}", idempotent=True)
