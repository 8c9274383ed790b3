"""``client.authorized_recipients``: who a sandbox account may send to."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from layang_client.defaults import DEFAULT_PAGE_SIZE
from layang_client.payload import _address
from layang_client.resources.namespace import _Resource
from layang_client.transport import _path_segment


class AuthorizedRecipients(_Resource):
    """``client.authorized_recipients``: who a sandbox account may send to."""

    _PATH = "/sandbox/authorized-recipients"

    def add(self, email: str, name: str | None = None) -> dict[str, Any]:
        """Add an address (``"a@x"`` or ``"Name <a@x>"``); it starts ``unverified`` and is
        sent a consent email. Raises :class:`ConflictError` if it is listed already."""
        address = _address(email)
        if name is not None:
            address["name"] = name
        return self._client._json("POST", self._PATH, json=address, idempotent=False)

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over the authorized recipients, newest first."""
        return self._client._paginate(self._PATH, {}, page_size)

    def get(self, recipient_id: str) -> dict[str, Any]:
        """One authorized recipient, with its ``status``."""
        return self._client._json(
            "GET", f"{self._PATH}/{_path_segment(recipient_id)}", idempotent=True
        )

    def delete(self, recipient_id: str) -> None:
        """Remove the recipient: the account may no longer send to it."""
        self._client._request(
            "DELETE", f"{self._PATH}/{_path_segment(recipient_id)}", idempotent=True
        )

    def resend(self, recipient_id: str) -> str:
        """Send the consent email again (the previous link stops working); returns its
        transmission id. Raises :class:`ConflictError` once consent was given."""
        answer = self._client._json(
            "POST", f"{self._PATH}/{_path_segment(recipient_id)}/resend", idempotent=False
        )
        return str(answer["transmissionId"])
