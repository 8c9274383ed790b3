"""``/v1/layang/activity``: every email's delivery record, newest first."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import marshmallow as ma
from flask import g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.fields import AddressOutSchema, CursorQuerySchema
from layang.domain.records import list_activity
from layang.models import EVENT_KINDS

blp = Blueprint("activity", __name__, description="What happened to every email sent.")


class EventSchema(ma.Schema):
    status = fields.String(metadata={"description": f"One of {', '.join(EVENT_KINDS)}."})
    timestamp = fields.String(metadata={"description": "ISO 8601 UTC."})
    detail = fields.Dict(
        metadata={"description": "The upstream SMTP reply, the clicked URL, the user agent."}
    )


class ActivityRecordSchema(ma.Schema):
    id = fields.String()
    transmissionId = fields.String()
    messageId = fields.String()
    recipient = fields.String()
    recipientType = fields.String(metadata={"description": "to, cc or bcc."})
    from_ = fields.Nested(AddressOutSchema, data_key="from", attribute="from")
    subject = fields.String()
    status = fields.String(metadata={"description": "Injection, Delay, Delivery or Bounce."})
    createdAt = fields.String()
    updatedAt = fields.String()
    metadata = fields.Dict(keys=fields.String(), values=fields.String())
    events = fields.List(fields.Nested(EventSchema))


class ActivityQuerySchema(CursorQuerySchema):
    status = fields.String(validate=validate.OneOf(EVENT_KINDS))
    recipient = fields.String(validate=validate.Length(max=320))
    transmissionId = fields.String(validate=validate.Length(max=64))
    since = fields.AwareDateTime(default_timezone=UTC, metadata={"description": "ISO 8601."})
    until = fields.AwareDateTime(default_timezone=UTC, metadata={"description": "ISO 8601."})


class ActivityPageSchema(ma.Schema):
    items = fields.List(fields.Nested(ActivityRecordSchema))
    nextCursor = fields.String(allow_none=True)


def _epoch_ms(value: Any) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


@blp.route("/activity")
class Activity(MethodView):
    @blp.arguments(ActivityQuerySchema(), location="query")
    @blp.response(200, ActivityPageSchema)
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List activity records, newest first

        Follow `nextCursor` (pass it as `cursor`) for the next page; it is null on the last.
        """
        items, next_cursor = list_activity(
            g.account,
            status=query.get("status"),
            recipient=query.get("recipient"),
            transmission_id=query.get("transmissionId"),
            since=_epoch_ms(query.get("since")),
            until=_epoch_ms(query.get("until")),
            limit=query["limit"],
            cursor=query.get("cursor"),
        )
        return {"items": items, "nextCursor": next_cursor}
