"""``/v1/layang/transmissions``: send a message, read what became of it."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import flask
import marshmallow as ma
from flask import current_app, g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.activity import ActivityRecordSchema
from layang.api.fields import (
    ISO_8601,
    CompatSchema,
    EmailAddress,
    ErrorSchema,
    MailboxSchema,
    Timestamp,
    no_line_breaks,
    strip_empty,
)
from layang.domain.intake import accept_transmission
from layang.domain.records import TransmissionView, get_transmission_view
from layang.sending.compose import SMTP_POLICY

blp = Blueprint(
    "transmissions", __name__, description="Send transactional email and look up a sent message."
)

RESERVED_HEADERS = frozenset(
    (
        "from",
        "to",
        "cc",
        "bcc",
        "subject",
        "date",
        "message-id",
        "mime-version",
        "dkim-signature",
        "return-path",
    )
)
HEADER_NAME = re.compile(r"^[!-9;-~]{1,76}$")
MIME_TYPE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}$"
)
MAX_RECIPIENTS = 1000


class AddressSchema(CompatSchema):
    email = EmailAddress(required=True, metadata={"description": "An email address."})
    name = fields.String(
        validate=[validate.Length(max=256), no_line_breaks],
        metadata={"description": "Display name (optional)."},
    )


class AttachmentSchema(CompatSchema):
    mimeType = fields.String(
        validate=validate.Regexp(MIME_TYPE, error="Not a valid media type (type/subtype)."),
        metadata={"description": "Media type; guessed from the file name when absent."},
    )
    filename = fields.String(
        required=True,
        validate=validate.Length(max=255),
        metadata={"description": "File name with extension, no path."},
    )
    value = fields.String(required=True, metadata={"description": "The content, Base64."})

    @ma.validates("filename")
    def plain_filename(self, value: str, **kwargs: Any) -> None:
        if "/" in value or "\\" in value or any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise ma.ValidationError("Must not contain path separators or control characters.")
        if value in (".", ".."):
            raise ma.ValidationError("Not a file name.")

    @ma.validates("mimeType")
    def single_part(self, value: str, **kwargs: Any) -> None:
        if value.lower().startswith("multipart/"):
            raise ma.ValidationError("A multipart type cannot be attached as a file.")

    @ma.validates("value")
    def base64_value(self, value: str, **kwargs: Any) -> None:
        try:
            base64.b64decode("".join(value.split()), validate=True)
        except (binascii.Error, ValueError):
            raise ma.ValidationError("Not valid Base64.") from None


class HeaderSchema(CompatSchema):
    name = fields.String(required=True, metadata={"description": "Header field name."})
    value = fields.String(
        required=True,
        validate=[validate.Length(max=8000), no_line_breaks],
        metadata={"description": "Header value, no line breaks."},
    )

    @ma.validates("name")
    def allowed_name(self, value: str, **kwargs: Any) -> None:
        if not HEADER_NAME.match(value):
            raise ma.ValidationError("Not a valid header name.")
        lowered = value.lower()
        if lowered in RESERVED_HEADERS or lowered.startswith("content-"):
            raise ma.ValidationError(f"{value} is set by the service and cannot be given.")

    @ma.validates_schema
    def well_formed(self, data: dict[str, Any], **kwargs: Any) -> None:
        if "name" not in data or "value" not in data:
            return
        # Structured headers (Reply-To, Sender, List-*) must parse, or the message could not be
        # written later; finding that out now turns a lost message into a clear 400.
        try:
            header = SMTP_POLICY.header_factory(data["name"], data["value"])
            header.fold(policy=SMTP_POLICY)
        except Exception:
            raise ma.ValidationError("Not a valid value for this header.", "value") from None
        if header.defects:
            raise ma.ValidationError(f"Not a valid value: {header.defects[0]}.", "value")


class OptionsAttributesSchema(CompatSchema):
    clickTracking = fields.Boolean(metadata={"description": "Track clicks on links."})
    openTracking = fields.Boolean(metadata={"description": "Track opens."})
    transactional = fields.Boolean(
        metadata={"description": "Accepted for compatibility; every message is transactional."}
    )


def _addresses(description: str, **kwargs: Any) -> fields.List:
    return fields.List(
        fields.Nested(AddressSchema), metadata={"description": description}, **kwargs
    )


class TransmissionRequestSchema(CompatSchema):
    from_ = fields.Nested(
        AddressSchema, required=True, data_key="from", metadata={"description": "The sender."}
    )
    subject = fields.String(
        validate=[validate.Length(max=998), no_line_breaks],
        metadata={"description": "Required unless the template has one."},
    )
    to = _addresses("Primary recipients, at least one.", required=True)
    replyTo = _addresses("Reply-To addresses.")
    cc = _addresses("Carbon-copy recipients.")
    bcc = _addresses("Blind-carbon-copy recipients: they get the mail, no header shows them.")
    bodyText = fields.String(metadata={"description": "Plain-text body."})
    bodyHtml = fields.String(metadata={"description": "HTML body, a complete document."})
    attachments = fields.List(
        fields.Nested(AttachmentSchema),
        metadata={"description": "Files; `attachment` is an alias."},
    )
    optionsAttributes = fields.Nested(OptionsAttributesSchema)
    headers = fields.List(fields.Nested(HeaderSchema), metadata={"description": "Extra headers."})
    metadata = fields.Dict(
        keys=fields.String(validate=validate.Length(max=256)),
        values=fields.String(validate=validate.Length(max=8000)),
        metadata={"description": "String keys and values, kept with every activity record."},
    )
    templateId = fields.String(
        validate=validate.Length(max=64), metadata={"description": "A stored template's id."}
    )
    substitutionData = fields.Dict(
        keys=fields.String(), metadata={"description": "Values for the template's shortcodes."}
    )

    @ma.pre_load
    def attachment_alias(self, data: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict) and "attachment" in data:
            data = strip_empty(data)
            if "attachments" in data and "attachment" in data:
                raise ma.ValidationError("Give attachments or attachment, not both.", "attachment")
            if "attachment" in data:
                data["attachments"] = data.pop("attachment")
        return data

    @ma.validates_schema
    def content_and_recipients(self, data: dict[str, Any], **kwargs: Any) -> None:
        has_body = "bodyText" in data or "bodyHtml" in data
        if "templateId" in data and has_body:
            raise ma.ValidationError("Use templateId or bodyText/bodyHtml, not both.", "templateId")
        if "templateId" not in data and not has_body:
            raise ma.ValidationError("Give bodyText and/or bodyHtml, or a templateId.", "bodyText")
        if "substitutionData" in data and "templateId" not in data:
            raise ma.ValidationError("substitutionData needs a templateId.", "substitutionData")
        if "subject" not in data and "templateId" not in data:
            raise ma.ValidationError("Missing data for required field.", "subject")
        count = sum(len(data.get(kind, ())) for kind in ("to", "cc", "bcc"))
        if count > MAX_RECIPIENTS:
            raise ma.ValidationError(f"At most {MAX_RECIPIENTS} recipients in all.", "to")
        names = [h["name"].lower() for h in data.get("headers", ())]
        if "reply-to" in names and "replyTo" in data:
            raise ma.ValidationError("Give replyTo or a Reply-To header, not both.", "headers")


class TransmissionAcceptedSchema(ma.Schema):
    transmissionId = fields.String(
        required=True, metadata={"description": "Identifies the message in Activity."}
    )


class TransmissionSchema(ma.Schema):
    """Dumps a :class:`layang.domain.records.TransmissionView`."""

    id = fields.String(data_key="transmissionId")
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)
    source = fields.String(metadata={"description": "api or smtp."})
    sender = fields.Nested(MailboxSchema, data_key="from")
    subject = fields.String()
    recipients = fields.List(
        fields.Nested(ActivityRecordSchema), metadata={"description": "In the order given."}
    )


@blp.route("/transmissions")
class Transmissions(MethodView):
    @blp.arguments(TransmissionRequestSchema())  # one instance: building it per request is costly
    @blp.response(200, TransmissionAcceptedSchema)
    @blp.alt_response(401, schema=ErrorSchema, description="Missing, unknown or revoked key.")
    @blp.alt_response(404, schema=ErrorSchema, description="Unknown templateId.")
    @blp.alt_response(413, schema=ErrorSchema, description="Message too large.")
    @blp.alt_response(415, schema=ErrorSchema, description="Body is not application/json.")
    @blp.alt_response(422, schema=ErrorSchema, description="Sandbox rule refused the message.")
    def post(self, data: dict[str, Any]) -> flask.Response:
        """Send a message

        The answer comes only after the message is durably stored: from then on it is never lost.
        """
        config = current_app.config["LAYANG"]
        transmission_id = accept_transmission(g.account, data, config)
        # The hottest endpoint answers a fixed shape: skip the schema dump (still documented).
        return flask.jsonify(transmissionId=transmission_id)


@blp.route("/transmissions/<transmission_id>")
class TransmissionById(MethodView):
    @blp.response(200, TransmissionSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such transmission here.")
    def get(self, transmission_id: str) -> TransmissionView:
        """Look up a sent message and every recipient's record"""
        return get_transmission_view(g.account, transmission_id)
