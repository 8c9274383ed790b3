"""``/v1/layang/queue``: the account's own mail waiting for delivery, by recipient domain."""

from __future__ import annotations

import marshmallow as ma
from flask import g
from flask.views import MethodView
from marshmallow import fields

from layang.api import Blueprint
from layang.api.fields import ISO_8601, Timestamp
from layang.domain.queue_view import DomainQueue, account_queue
from layang.models import SITE_STATES

blp = Blueprint("queue", __name__, description="Mail waiting for delivery, by recipient domain.")


class QueueItemSchema(ma.Schema):
    """Dumps a :class:`layang.domain.queue_view.DomainQueue`."""

    domain = fields.String(metadata={"description": "The recipients' domain."})
    site = fields.String(
        metadata={
            "description": "The destination site the domain's mail goes to: a provider "
            "(e.g. google.com) or its MX host names joined by +."
        }
    )
    queued = fields.Integer(metadata={"description": "Emails waiting for an attempt."})
    oldest_at = Timestamp(
        data_key="oldestAt", metadata={**ISO_8601, "description": "When the oldest was sent."}
    )
    state = fields.String(
        metadata={
            "description": "ok, throttled (the site asked us to slow down) or suspended.",
            "enum": list(SITE_STATES),
        }
    )
    reason = fields.String(
        allow_none=True, metadata={"description": "Why the site waits, when it does."}
    )


class QueueSchema(ma.Schema):
    items = fields.List(fields.Nested(QueueItemSchema), metadata={"description": "Most first."})


@blp.route("/queue")
class Queue(MethodView):
    @blp.response(200, QueueSchema)
    def get(self) -> dict[str, list[DomainQueue]]:
        """List the account's waiting mail by recipient domain

        Each domain's site is shared with every domain hosted by the same provider; a site
        that answered "slow down" or kept refusing connections waits (`state`, `reason`).
        """
        return {"items": account_queue(g.account.id)}
