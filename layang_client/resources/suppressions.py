"""``client.suppressions``: the addresses the account never sends to."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from layang_client.defaults import DEFAULT_PAGE_SIZE
from layang_client.resources.namespace import _Resource
from layang_client.transport import _path_segment


class Suppressions(_Resource):
    """``client.suppressions``: the addresses the account never sends to."""

    _PATH = "/suppressions"

    def list(
        self,
        *,
        reason: str | None = None,
        email: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> Iterator[dict[str, Any]]:
        """Iterate over the entries, newest first: only those for ``reason`` (``hard_bounce``,
        ``complaint``, ``unsubscribe``, ``manual``) and whose address contains ``email``."""
        params = {k: v for k, v in (("reason", reason), ("email", email)) if v is not None}
        return self._client._paginate(self._PATH, params, page_size)

    def get(self, email: str) -> dict[str, Any]:
        """The entry for ``email``. Raises :class:`NotFoundError` when it is not listed."""
        return self._client._json("GET", f"{self._PATH}/{_path_segment(email)}", idempotent=True)

    def add(self, email: str, *, reason: str = "manual", note: str | None = None) -> dict[str, Any]:
        """Suppress ``email`` (replacing its entry, if any) and return the entry. ``reason`` is
        ``manual`` (no mail at all) or ``unsubscribe`` (no mail sent with ``transactional``
        false)."""
        body: dict[str, Any] = {"reason": reason}
        if note is not None:
            body["note"] = note
        return self._client._json(
            "PUT", f"{self._PATH}/{_path_segment(email)}", json=body, idempotent=True
        )

    put = add

    def delete(self, email: str) -> None:
        """Take ``email`` off the list: mail to it is sent again. Raises
        :class:`NotFoundError` when it is not listed."""
        self._client._request("DELETE", f"{self._PATH}/{_path_segment(email)}", idempotent=True)
