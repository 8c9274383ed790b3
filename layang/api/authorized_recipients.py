"""``/v1/layang/sandbox/authorized-recipients``: who a sandbox account may send to."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import current_app, g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.fields import (
    ISO_8601,
    CompatSchema,
    CursorQuerySchema,
    EmailAddress,
    ErrorSchema,
    Timestamp,
    no_line_breaks,
    page_schema,
)
from layang.domain.sandbox import (
    add_authorized_recipient,
    delete_authorized_recipient,
    get_authorized_recipient,
    list_authorized_recipients,
    resend_verification,
)
from layang.mail.message import MAX_DISPLAY_NAME
from layang.models import AuthorizedRecipient
from layang.pagination import Page

blp = Blueprint(
    "authorized_recipients",
    __name__,
    description="Addresses a sandbox account may send to, once they have given consent.",
)


class AuthorizedRecipientInSchema(CompatSchema):
    email = EmailAddress(required=True)
    name = fields.String(validate=[validate.Length(max=MAX_DISPLAY_NAME), no_line_breaks])


class AuthorizedRecipientSchema(ma.Schema):
    """Dumps an :class:`layang.models.AuthorizedRecipient`."""

    id = fields.String()
    email = fields.String()
    name = fields.String(allow_none=True)
    status = fields.String(metadata={"description": "unverified, then verified after consent."})
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)
    verified_at = Timestamp(
        allow_none=True,
        data_key="verifiedAt",
        metadata={**ISO_8601, "description": "When consent was given; null until then."},
    )


AuthorizedRecipientListSchema = page_schema(
    AuthorizedRecipientSchema, "AuthorizedRecipientListSchema"
)


class ResendSchema(ma.Schema):
    transmissionId = fields.String()


@blp.route("/sandbox/authorized-recipients")
class AuthorizedRecipients(MethodView):
    @blp.arguments(CursorQuerySchema(), location="query")
    @blp.response(200, AuthorizedRecipientListSchema)
    def get(self, query: dict[str, Any]) -> Page[AuthorizedRecipient]:
        """List authorized recipients, newest first"""
        return list_authorized_recipients(
            g.account, limit=query["limit"], cursor=query.get("cursor")
        )

    @blp.arguments(AuthorizedRecipientInSchema())
    @blp.response(201, AuthorizedRecipientSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="The address is already listed.")
    def post(self, data: dict[str, Any]) -> AuthorizedRecipient:
        """Add an authorized recipient

        It starts `unverified`; a verification email with a consent link goes to the address.
        """
        return add_authorized_recipient(
            g.account,
            data["email"],
            data.get("name"),
            current_app.config["LAYANG"],
        )


@blp.route("/sandbox/authorized-recipients/<recipient_id>")
class AuthorizedRecipientById(MethodView):
    @blp.response(200, AuthorizedRecipientSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such authorized recipient.")
    def get(self, recipient_id: str) -> AuthorizedRecipient:
        """Get an authorized recipient"""
        return get_authorized_recipient(g.account, recipient_id)

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="No such authorized recipient.")
    def delete(self, recipient_id: str) -> None:
        """Remove an authorized recipient"""
        delete_authorized_recipient(g.account, recipient_id)


@blp.route("/sandbox/authorized-recipients/<recipient_id>/resend")
class ResendVerification(MethodView):
    @blp.response(202, ResendSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="Consent was already given.")
    def post(self, recipient_id: str) -> dict[str, str]:
        """Send the verification email again

        The previous consent link stops working.
        """
        config = current_app.config["LAYANG"]
        return {"transmissionId": resend_verification(g.account, recipient_id, config)}
