"""``/v1/layang/activity``: every email's delivery record, newest first."""

from __future__ import annotations

from datetime import UTC
from typing import Any

import marshmallow as ma
from flask import g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.fields import (
    ISO_8601,
    CursorQuerySchema,
    MailboxSchema,
    Timestamp,
    page_schema,
)
from layang.domain.records import EXPIRED, STORED, ActivityRecord, list_activity
from layang.mail.bounce_class import BOUNCE_CLASSES
from layang.mail.message import MAX_TAG_LENGTH
from layang.models import EVENT_KINDS
from layang.pagination import Page

blp = Blueprint("activity", __name__, description="What happened to every email sent.")


class EventSchema(ma.Schema):
    """Dumps a :class:`layang.domain.records.ActivityEvent`."""

    status = fields.String(metadata={"description": f"One of {', '.join(EVENT_KINDS)}."})
    timestamp = Timestamp(attribute="timestamp_ms", metadata=ISO_8601)
    detail = fields.Dict(
        metadata={"description": "The upstream SMTP reply, the clicked URL, the user agent."}
    )
    bounce_class = fields.Function(
        lambda event: event.detail.get("bounceClass"),
        data_key="bounceClass",
        metadata={
            "description": "Delay and Bounce only: hard, soft, block or undetermined.",
            "enum": list(BOUNCE_CLASSES),
        },
    )

    @ma.post_dump
    def _only_where_known(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        if data.get("bounceClass") is None:
            data.pop("bounceClass", None)
        return data


class ActivityRecordSchema(ma.Schema):
    """Dumps a :class:`layang.domain.records.ActivityRecord`."""

    id = fields.String()
    transmission_id = fields.String(data_key="transmissionId")
    message_id = fields.String(data_key="messageId")
    recipient = fields.String()
    recipient_type = fields.String(
        data_key="recipientType", metadata={"description": "to, cc or bcc."}
    )
    sender = fields.Nested(MailboxSchema, data_key="from")
    subject = fields.String()
    status = fields.String(
        metadata={
            "description": "Injection, Delay, Delivery, Bounce, or Suppressed (never sent: the "
            "address is on the suppression list)."
        }
    )
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)
    updated_at = Timestamp(data_key="updatedAt", metadata=ISO_8601)
    metadata = fields.Dict(
        keys=fields.String(),
        metadata={"description": "The message's metadata, as sent: any JSON values."},
    )
    events = fields.List(
        fields.Nested(EventSchema),
        metadata={
            "description": "Oldest first; at most the newest 100 plus the first of each status."
        },
    )
    events_omitted = fields.Integer(
        data_key="eventsOmitted",
        metadata={"description": "How many stored events `events` leaves out (0 mostly)."},
    )
    stream = fields.String(metadata={"description": "transactional or broadcast."})
    content = fields.String(
        metadata={
            "description": "stored, or expired: retention removed the message's content "
            "(its bodies and attachments); the record and its events stay.",
            "enum": [STORED, EXPIRED],
        }
    )
    tags = fields.List(
        fields.String(), metadata={"description": "The message's tags, in the order sent."}
    )


class ActivityQuerySchema(CursorQuerySchema):
    status = fields.String(validate=validate.OneOf(EVENT_KINDS))
    recipient = fields.String(
        validate=validate.Length(max=320),
        metadata={"description": "A whole address (any case)."},
    )
    recipientContains = fields.String(
        validate=validate.Length(min=1, max=320),
        metadata={
            "description": "Part of an address (any case), as the console's search: "
            "`rcpt.test` finds every recipient there."
        },
    )
    transmissionId = fields.String(validate=validate.Length(max=64))
    tag = fields.String(
        validate=validate.Length(min=1, max=MAX_TAG_LENGTH),
        metadata={"description": "Only the records of messages with this tag (exact)."},
    )
    since = fields.AwareDateTime(default_timezone=UTC, metadata={"description": "ISO 8601."})
    until = fields.AwareDateTime(default_timezone=UTC, metadata={"description": "ISO 8601."})


ActivityPageSchema = page_schema(ActivityRecordSchema, "ActivityPageSchema")


def _epoch_ms(value: Any) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


@blp.route("/activity")
class Activity(MethodView):
    @blp.arguments(ActivityQuerySchema(), location="query")
    @blp.response(200, ActivityPageSchema)
    def get(self, query: dict[str, Any]) -> Page[ActivityRecord]:
        """List activity records, newest first

        Follow `nextCursor` (pass it as `cursor`) for the next page; it is null on the last.
        """
        return list_activity(
            g.account,
            status=query.get("status"),
            recipient=query.get("recipient"),
            recipient_contains=query.get("recipientContains", ""),
            transmission_id=query.get("transmissionId"),
            tag=query.get("tag"),
            since=_epoch_ms(query.get("since")),
            until=_epoch_ms(query.get("until")),
            limit=query["limit"],
            cursor=query.get("cursor"),
        )
