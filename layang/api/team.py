"""``/v1/layang/team``: bringing people into the account (CONTRACT section 21)."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import current_app, g, request
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.fields import ISO_8601, CompatSchema, Timestamp
from layang.clock import now_ms
from layang.models import ADMIN, ROLES
from layang.team import audit, invitations, links

blp = Blueprint("team", __name__, description="The people who sign in to the console.")


class InvitationInSchema(CompatSchema):
    email = fields.String(required=True, validate=validate.Length(min=3, max=320))
    role = fields.String(
        required=True,
        validate=validate.OneOf(ROLES),
        metadata={
            "description": "viewer, developer or admin (an owner is invited by an owner in the "
            "console)."
        },
    )


class InvitationSchema(ma.Schema):
    email = fields.String()
    role = fields.String()
    expires_at = Timestamp(data_key="expiresAt", metadata=ISO_8601)


@blp.route("/team/invitations")
class Invitations(MethodView):
    @blp.arguments(InvitationInSchema())
    @blp.response(202, InvitationSchema)
    def post(self, data: dict[str, Any]) -> dict[str, Any]:
        """Invite someone

        Mails a link (through this account's own sending, so it shows in Activity) that works
        once, for 72 hours, to join the account with the role given. The answer is the same
        whether or not the address is a user or a member already.
        """
        invitations.invite(
            g.account,
            data["email"],
            data["role"],
            # A key acts as an admin here: it may not make owners.
            actor=audit.key_actor(g.credential.key_id),
            actor_role=ADMIN,
            source=request.remote_addr or "unknown",
            config=current_app.config["LAYANG"],
        )
        return {
            "email": data["email"].strip(),
            "role": data["role"],
            "expires_at": now_ms() + links.LINK_LIFETIME_MS[links.INVITE],
        }
