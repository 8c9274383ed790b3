"""``client.domains``: sending domains, the DNS records to publish, and their DKIM keys."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from layang_client.defaults import DEFAULT_PAGE_SIZE
from layang_client.resources.namespace import _Resource
from layang_client.transport import _path_segment


class Domains(_Resource):
    """``client.domains``: sending domains, the DNS records to publish, and their DKIM keys."""

    _PATH = "/domains"

    def create(self, domain: str, *, return_path_domain: str | None = None) -> dict[str, Any]:
        """Add a domain; it starts ``pending`` with a fresh DKIM key and lists the ``records``
        to publish. Raises :class:`ConflictError` if it is added already (here or elsewhere)."""
        body = {"domain": domain}
        if return_path_domain is not None:
            body["returnPathDomain"] = return_path_domain
        return self._client._json("POST", self._PATH, json=body, idempotent=False)

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over the sending domains, newest first, as of their last check."""
        return self._client._paginate(self._PATH, {}, page_size)

    def get(self, domain: str) -> dict[str, Any]:
        """One domain, as of its last check."""
        return self._client._json("GET", f"{self._PATH}/{_path_segment(domain)}", idempotent=True)

    def verify(self, domain: str) -> dict[str, Any]:
        """Check every record in DNS now; the domain is ``verified`` once DKIM matches."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(domain)}/verify", idempotent=True
        )

    def rotate(self, domain: str) -> dict[str, Any]:
        """Add a new DKIM key, ``pending`` until its record verifies; signing moves to it then.
        Raises :class:`ConflictError` while another new key is pending."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(domain)}/dkim/rotate", idempotent=False
        )

    def delete_key(self, domain: str, selector: str) -> None:
        """Delete one DKIM key. Raises :class:`ConflictError` for the only active key."""
        self._client._request(
            "DELETE",
            f"{self._PATH}/{_path_segment(domain)}/dkim/{_path_segment(selector)}",
            idempotent=True,
        )

    def delete(self, domain: str) -> None:
        """Delete the domain and its keys: its mail is no longer signed."""
        self._client._request("DELETE", f"{self._PATH}/{_path_segment(domain)}", idempotent=True)
