"""``/v1/layang/recipients/{email}``: erasing everything an account holds about one person
(docs/api.md, "Erasing a recipient")."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import g, request
from flask.views import MethodView
from marshmallow import fields

from layang.api import Blueprint
from layang.api.fields import ErrorSchema
from layang.lifecycle.erasure import Erasure, erase_recipient
from layang.team import audit

blp = Blueprint("recipients", __name__, description="Erasing a person's data (GDPR art. 17).")


class ErasureSchema(ma.Schema):
    """Dumps a :class:`layang.lifecycle.erasure.Erasure`."""

    email = fields.String(metadata={"description": "The address erased, lower-cased."})
    records = fields.Integer(metadata={"description": "Activity records removed."})
    events = fields.Integer(metadata={"description": "Their events removed."})
    messages = fields.Integer(
        metadata={"description": "Messages removed whole, content and all (sent only to it)."}
    )


class ErasureQuerySchema(ma.Schema):
    suppression = fields.Boolean(
        load_default=False,
        metadata={
            "description": "true: take the address off the suppression list too (by default "
            "the entry stays, so that the person is still not mailed)."
        },
    )


@blp.route("/recipients/<path:email>")
class RecipientByEmail(MethodView):
    @blp.arguments(ErasureQuerySchema(), location="query")
    @blp.response(200, ErasureSchema)
    @blp.alt_response(400, schema=ErrorSchema, description="`email` is not an address.")
    def delete(self, query: dict[str, Any], email: str) -> Erasure:
        """Erase a recipient

        Removes, for this account only, every activity record of the address (queued mail
        included: it is not sent), their events, webhook events about them not yet sent, and
        the messages that went only to it. Recorded in the audit log with the address's
        SHA-256, never the address.
        """
        return erase_recipient(
            g.account,
            email,
            actor=audit.key_actor(g.credential.key_id),
            source=request.remote_addr or "",
            suppression=query["suppression"],
        )
