"""Fields and schemas that several API resources share: the error body, listing queries,
addresses, timestamps, and the compatibility rule that empty values mean "absent"."""

from __future__ import annotations

from typing import Any, ClassVar

import marshmallow as ma
from marshmallow import fields

from layang.clock import iso_ms
from layang.mail.message import (
    MAX_NESTING,
    InvalidAddress,
    has_line_break,
    nested_too_deep,
    normalize_address,
)


class ErrorSchema(ma.Schema):
    """The body of every non-2xx answer."""

    error = ma.fields.String(
        required=True, metadata={"description": "Stable snake_case code, e.g. validation_failed."}
    )
    message = ma.fields.String(
        required=True, metadata={"description": "One sentence naming the field or the cause."}
    )
    status = ma.fields.Integer(required=True, metadata={"description": "The HTTP status."})
    errors = ma.fields.Dict(
        metadata={"description": "Validation only: field-by-field messages, nested like the body."}
    )


class CursorQuerySchema(ma.Schema):
    """``limit`` and ``cursor`` of every listing; follow ``nextCursor`` for the next page."""

    limit = ma.fields.Integer(load_default=50, validate=ma.validate.Range(min=1, max=500))
    cursor = ma.fields.String(validate=ma.validate.Length(max=64))


class Timestamp(fields.Field):
    """An epoch-milliseconds value, written as ISO 8601 UTC (``2026-11-21T10:00:00.123Z``)."""

    def _serialize(self, value: Any, attr: str | None, obj: Any, **kwargs: Any) -> str | None:
        return None if value is None else iso_ms(value)


def no_line_breaks(value: str) -> None:
    if has_line_break(value):
        raise ma.ValidationError("Must not contain line breaks or NUL characters.")


class EmailAddress(fields.String):
    """An email address, validated and normalised (domain lower-cased, IDNA) in one step, so
    the rest of the service only ever sees normalised addresses."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> str:
        try:
            return normalize_address(super()._deserialize(value, attr, data, **kwargs))
        except InvalidAddress as error:
            raise ma.ValidationError(str(error)) from None


def strip_empty(value: Any, verbatim: frozenset[str] = frozenset()) -> Any:
    """Published client libraries send ``""``, ``[]`` and ``{}`` for fields they do not use:
    those mean "absent". Applied to object members at every depth, not to list items; the
    top-level members named in ``verbatim`` are dropped when empty and otherwise kept as sent.

    Raises ``ValidationError`` naming the top-level member nested more than ``MAX_NESTING``
    levels deep (a few hundred levels would otherwise exhaust the stack here or later)."""
    if not isinstance(value, dict):
        return _stripped(value, 0, "_schema")
    return {
        k: v if k in verbatim else _stripped(v, 1, k) for k, v in value.items() if not _is_empty(v)
    }


def _stripped(value: Any, depth: int, member: str) -> Any:
    if isinstance(value, dict | list) and depth > MAX_NESTING:
        raise ma.ValidationError(f"Nested more than {MAX_NESTING} levels deep.", member)
    if isinstance(value, dict):
        return {k: _stripped(v, depth + 1, member) for k, v in value.items() if not _is_empty(v)}
    if isinstance(value, list):
        return [_stripped(v, depth + 1, member) for v in value]
    return value


def _is_empty(value: Any) -> bool:
    # Compared by type first: ``v in ("", [], {})`` on a deep value compares it recursively.
    return value is None or (isinstance(value, str | list | dict) and not value)


class RequestBodySchema(ma.Schema):
    """A JSON request body whose members, known to the schema or not, are refused when nested
    more than ``MAX_NESTING`` levels deep, as a send's are (``CompatSchema``): a 400 naming the
    member rather than a deep value reaching code that recurses."""

    @ma.pre_load
    def nesting_limit(self, data: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict):
            for member, value in data.items():
                if nested_too_deep(value):
                    raise ma.ValidationError(f"Nested more than {MAX_NESTING} levels deep.", member)
        return data


class CompatSchema(ma.Schema):
    verbatim: ClassVar[frozenset[str]] = frozenset()
    """Members holding the client's own data (kept as sent: an empty string in them is data)."""

    @ma.pre_load
    def empty_means_absent(self, data: Any, **kwargs: Any) -> Any:
        return strip_empty(data, self.verbatim) if isinstance(data, dict) else data


ISO_8601: dict[str, Any] = {"type": "string", "format": "date-time"}
"""The OpenAPI type of a :class:`Timestamp`: ``Timestamp(metadata=ISO_8601)``."""


class MailboxSchema(ma.Schema):
    """An address as records show it: ``{"email", "name"}``, with no ``name`` key when there is
    no name: the wire has always left it out rather than sending null."""

    email = fields.String()
    name = fields.String(metadata={"description": "Display name, when there is one."})

    @ma.post_dump
    def drop_missing_name(self, data: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if data.get("name") is None:
            data.pop("name", None)
        return data


def page_schema(item_schema: type[ma.Schema], name: str) -> type[ma.Schema]:
    """The schema ``name`` of a listing's body, ``{"items": [...], "nextCursor": ...}``, that
    dumps a :class:`layang.pagination.Page` of what ``item_schema`` dumps."""
    return ma.Schema.from_dict(
        {
            "items": fields.List(fields.Nested(item_schema)),
            "next_cursor": fields.String(
                allow_none=True,
                data_key="nextCursor",
                metadata={"description": "The `cursor` of the next page; null on the last page."},
            ),
        },
        name=name,
    )
