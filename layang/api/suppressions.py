"""``/v1/layang/suppressions``: the addresses an account never sends to (docs/api.md, "Suppression
list")."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.fields import (
    ISO_8601,
    CompatSchema,
    CursorQuerySchema,
    ErrorSchema,
    Timestamp,
    page_schema,
)
from layang.domain.suppressions import (
    MAX_NOTE,
    delete_suppression,
    get_suppression,
    list_suppressions,
    put_suppression,
)
from layang.models import MANUAL, SUPPRESSION_REASONS, UNSUBSCRIBED, Suppression
from layang.pagination import Page

blp = Blueprint(
    "suppressions",
    __name__,
    description="Addresses never sent to: hard bounces, complaints, unsubscribes, your own.",
)

REASONS_DESCRIPTION = (
    "hard_bounce, complaint, unsubscribe (stops only broadcast mail: stream broadcast or "
    "transactional: false in the API, X-Layang-Stream: broadcast over SMTP) or manual."
)


class SuppressionSchema(ma.Schema):
    """Dumps a :class:`layang.models.Suppression`."""

    email = fields.String()
    reason = fields.String(
        metadata={"description": REASONS_DESCRIPTION, "enum": list(SUPPRESSION_REASONS)}
    )
    transmission_id = fields.String(
        allow_none=True,
        data_key="transmissionId",
        metadata={"description": "The message whose bounce, complaint or unsubscribe added it."},
    )
    detail = fields.String(metadata={"description": "The remote server's reply, if any."})
    note = fields.String(metadata={"description": "Your note, given when you added it."})
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)


SuppressionListSchema = page_schema(SuppressionSchema, "SuppressionListSchema")


class SuppressionQuerySchema(CursorQuerySchema):
    reason = fields.String(validate=validate.OneOf(SUPPRESSION_REASONS))
    email = fields.String(
        validate=validate.Length(max=320),
        metadata={"description": "Only addresses containing this text (any case)."},
    )


class SuppressionInSchema(CompatSchema):
    reason = fields.String(
        load_default=MANUAL,
        validate=validate.OneOf((MANUAL, UNSUBSCRIBED)),
        metadata={
            "description": "manual (the default: no mail at all), or unsubscribe (no "
            "broadcast mail), e.g. to bring over opt-outs kept elsewhere."
        },
    )
    note = fields.String(validate=validate.Length(max=MAX_NOTE))


@blp.route("/suppressions")
class Suppressions(MethodView):
    @blp.arguments(SuppressionQuerySchema(), location="query")
    @blp.response(200, SuppressionListSchema)
    def get(self, query: dict[str, Any]) -> Page[Suppression]:
        """List suppressed addresses, newest first

        Follow `nextCursor` (pass it as `cursor`) for the next page; it is null on the last.
        """
        return list_suppressions(
            g.account,
            reason=query.get("reason"),
            email=query.get("email"),
            limit=query["limit"],
            cursor=query.get("cursor"),
        )


@blp.route("/suppressions/<path:email>")
class SuppressionByEmail(MethodView):
    @blp.response(200, SuppressionSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="The address is not listed.")
    def get(self, email: str) -> Suppression:
        """Look up an address"""
        return get_suppression(g.account, email)

    @blp.arguments(SuppressionInSchema())
    @blp.response(200, SuppressionSchema)
    def put(self, data: dict[str, Any], email: str) -> Suppression:
        """Suppress an address

        Replaces the entry already there, if any. Mail to the address stops at once, queued
        mail included.
        """
        return put_suppression(g.account, email, reason=data["reason"], note=data.get("note"))

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="The address is not listed.")
    def delete(self, email: str) -> None:
        """Take an address off the list

        Mail to it is sent again from now on.
        """
        delete_suppression(g.account, email)
