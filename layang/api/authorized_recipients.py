"""``/v1/layang/sandbox/authorized-recipients``: who a sandbox account may send to."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import current_app, g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.fields import (
    CompatSchema,
    CursorQuerySchema,
    EmailAddress,
    ErrorSchema,
    no_line_breaks,
)
from layang.clock import iso_ms
from layang.domain.sandbox import (
    add_authorized_recipient,
    delete_authorized_recipient,
    get_authorized_recipient,
    list_authorized_recipients,
    resend_verification,
)
from layang.models import AuthorizedRecipient

blp = Blueprint(
    "authorized_recipients",
    __name__,
    description="Addresses a sandbox account may send to, once they have given consent.",
)


class AuthorizedRecipientInSchema(CompatSchema):
    email = EmailAddress(required=True)
    name = fields.String(validate=[validate.Length(max=256), no_line_breaks])


class AuthorizedRecipientSchema(ma.Schema):
    id = fields.String()
    email = fields.String()
    name = fields.String(allow_none=True)
    status = fields.String(metadata={"description": "unverified, then verified after consent."})
    createdAt = fields.String()
    verifiedAt = fields.String(allow_none=True)


class AuthorizedRecipientListSchema(ma.Schema):
    items = fields.List(fields.Nested(AuthorizedRecipientSchema))
    nextCursor = fields.String(allow_none=True)


class ResendSchema(ma.Schema):
    transmissionId = fields.String()


def as_dict(recipient: AuthorizedRecipient) -> dict[str, Any]:
    return {
        "id": recipient.id,
        "email": recipient.email,
        "name": recipient.name,
        "status": recipient.status,
        "createdAt": iso_ms(recipient.created_at),
        "verifiedAt": iso_ms(recipient.verified_at) if recipient.verified_at else None,
    }


@blp.route("/sandbox/authorized-recipients")
class AuthorizedRecipients(MethodView):
    @blp.arguments(CursorQuerySchema(), location="query")
    @blp.response(200, AuthorizedRecipientListSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List authorized recipients, newest first"""
        rows, next_cursor = list_authorized_recipients(
            g.account, limit=query["limit"], cursor=query.get("cursor")
        )
        return {"items": [as_dict(r) for r in rows], "nextCursor": next_cursor}

    @blp.arguments(AuthorizedRecipientInSchema())
    @blp.response(201, AuthorizedRecipientSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="The address is already listed.")
    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """Add an authorized recipient

        It starts `unverified`; a verification email with a consent link goes to the address.
        """
        recipient = add_authorized_recipient(
            g.account,
            data["email"],
            data.get("name"),
            current_app.config["LAYANG"],
        )
        return as_dict(recipient)


@blp.route("/sandbox/authorized-recipients/<recipient_id>")
class AuthorizedRecipientById(MethodView):
    @blp.response(200, AuthorizedRecipientSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such authorized recipient.")
    def get(self, recipient_id: str) -> dict[str, Any]:
        """Get an authorized recipient"""
        return as_dict(get_authorized_recipient(g.account, recipient_id))

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
