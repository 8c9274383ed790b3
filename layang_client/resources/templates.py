"""``client.templates``: stored templates with shortcodes, versioned, with ETags."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from layang_client.defaults import DEFAULT_PAGE_SIZE
from layang_client.payload import UNSET, _quoted_etag, _Unset
from layang_client.resources.namespace import _Resource
from layang_client.transport import _decode, _path_segment


class Templates(_Resource):
    """``client.templates``: stored templates with shortcodes, versioned, with ETags."""

    def create(
        self,
        *,
        name: str,
        id: str | None = None,
        subject: str | None = None,
        body_html: str | None = None,
        body_text: str | None = None,
    ) -> dict[str, Any]:
        """Create a template (``id`` is generated when not given); returns it.

        Raises :class:`ConflictError` when the id is taken and :class:`ValidationError`
        naming the part and line when a part does not parse.
        """
        body: dict[str, Any] = {"name": name}
        for key, value in (
            ("id", id),
            ("subject", subject),
            ("bodyHtml", body_html),
            ("bodyText", body_text),
        ):
            if value is not None:
                body[key] = value
        return self._client._json("POST", "/templates", json=body, idempotent=False)

    def get(self, template_id: str) -> dict[str, Any]:
        """The template's current version."""
        return self.get_with_etag(template_id)[0]

    def get_with_etag(self, template_id: str) -> tuple[dict[str, Any], str | None]:
        """The template and its ETag, to pass as ``if_match`` to :meth:`update`."""
        response = self._client._request(
            "GET", f"/templates/{_path_segment(template_id)}", idempotent=True
        )
        return _decode(response), response.headers.get("ETag")

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over every template, by id, fetching pages as needed."""
        return self._client._paginate("/templates", {}, page_size)

    def update(
        self,
        template_id: str,
        *,
        name: str | _Unset = UNSET,
        subject: str | _Unset | None = UNSET,
        body_html: str | _Unset | None = UNSET,
        body_text: str | _Unset | None = UNSET,
        if_match: str | None = None,
    ) -> dict[str, Any]:
        """Save a new version; fields not given keep their value, None removes a part.

        With ``if_match`` (an ETag from :meth:`get_with_etag`) the update is refused with
        :class:`PreconditionFailedError` if the template changed meanwhile.
        """
        body = {
            key: value
            for key, value in (
                ("name", name),
                ("subject", subject),
                ("bodyHtml", body_html),
                ("bodyText", body_text),
            )
            if value is not UNSET
        }
        headers = {"If-Match": _quoted_etag(if_match)} if if_match else None
        return self._client._json(
            "PUT",
            f"/templates/{_path_segment(template_id)}",
            json=body,
            headers=headers,
            idempotent=True,
        )

    def delete(self, template_id: str) -> None:
        """Delete the template and all its versions."""
        self._client._request("DELETE", f"/templates/{_path_segment(template_id)}", idempotent=True)

    def preview(
        self, template_id: str, substitution_data: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Render the current version: ``{"subject", "bodyHtml", "bodyText"}``."""
        return self._client._json(
            "POST",
            f"/templates/{_path_segment(template_id)}/preview",
            json={"substitutionData": dict(substitution_data or {})},
            idempotent=True,
        )
