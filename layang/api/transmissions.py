"""``/v1/layang/transmissions``: send a message, read what became of it."""

from __future__ import annotations

import email.utils
import json
from datetime import UTC, datetime
from typing import Any

import flask
import marshmallow as ma
from flask import current_app, g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.activity import ActivityRecordSchema
from layang.api.errors import ValidationFailed, as_api_error, describe, first_error
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
from layang.api.idempotency import current_claim
from layang.clock import now_ms
from layang.domain import scheduled_sends
from layang.domain.errors import LayangError
from layang.domain.intake import (
    MAX_BATCH,
    MAX_SCHEDULE_DAYS,
    RecipientData,
    TransmissionRequest,
    accept_transmission,
    metadata_object,
    prepare_batch,
    schedule_time,
    store_batch,
)
from layang.domain.records import TransmissionView, get_transmission_view
from layang.mail.message import (
    DISPOSITIONS,
    HEADER_NAME,
    MAX_ATTACHMENTS,
    MAX_DISPLAY_NAME,
    MAX_FILENAME,
    MAX_HEADER_VALUE,
    MAX_HEADERS,
    MAX_RECIPIENTS,
    MAX_SUBJECT,
    MAX_TAG_LENGTH,
    MAX_TAGS,
    MEDIA_TYPE,
    Attachment,
    Header,
    InvalidHeader,
    Mailbox,
    OutgoingMessage,
    check_header,
    content_id_problem,
    distinct_tags,
    filename_problem,
    is_base64,
    is_reserved_header,
    tag_problem,
    without_whitespace,
)
from layang.models import BROADCAST, STREAMS, TRANSACTIONAL

blp = Blueprint(
    "transmissions", __name__, description="Send transactional email and look up a sent message."
)


class AddressSchema(CompatSchema):
    email = EmailAddress(
        required=True, metadata={"description": "An email address.", "example": "ana@example.org"}
    )
    name = fields.String(
        validate=[validate.Length(max=MAX_DISPLAY_NAME), no_line_breaks],
        metadata={"description": "Display name (optional).", "example": "Ana Putri"},
    )

    @ma.pre_load
    def from_string(self, data: Any, **kwargs: Any) -> Any:
        """``"a@x"`` or ``"Name <a@x>"`` stands for ``{"email", "name"}``, as in the SDK."""
        if not isinstance(data, str):
            return data
        name, address = email.utils.parseaddr(data)
        if not address or "@" not in address:
            return {"email": data}  # refused as an address, naming the field
        return {"email": address, "name": name} if name else {"email": address}

    @ma.post_load
    def make_mailbox(self, data: dict[str, Any], **kwargs: Any) -> Mailbox:
        return Mailbox(data["email"], data.get("name"))


class AttachmentSchema(CompatSchema):
    mimeType = fields.String(
        validate=validate.Regexp(MEDIA_TYPE, error="Not a valid media type (type/subtype)."),
        metadata={
            "description": "Media type; guessed from the file name when absent.",
            "example": "application/pdf",
        },
    )
    filename = fields.String(
        required=True,
        validate=validate.Length(max=MAX_FILENAME),
        metadata={"description": "File name with extension, no path.", "example": "invoice.pdf"},
    )
    value = fields.String(
        required=True,
        metadata={"description": "The content, Base64.", "example": "JVBERi0xLjQKJcOkw7zDtsOfCg=="},
    )
    contentId = fields.String(
        metadata={
            "description": "Content-ID, with or without <>: the HTML shows an inline part as "
            "`cid:<contentId>`."
        }
    )
    disposition = fields.String(
        validate=validate.OneOf(DISPOSITIONS),
        metadata={"description": "attachment, or inline (the default when contentId is given)."},
    )

    @ma.validates("filename")
    def plain_filename(self, value: str, **kwargs: Any) -> None:
        problem = filename_problem(value)
        if problem:
            raise ma.ValidationError(problem)

    @ma.validates("mimeType")
    def single_part(self, value: str, **kwargs: Any) -> None:
        if value.lower().startswith("multipart/"):
            raise ma.ValidationError("A multipart type cannot be attached as a file.")

    @ma.validates("value")
    def base64_value(self, value: str, **kwargs: Any) -> None:
        if not is_base64(value):
            raise ma.ValidationError("Not valid Base64.")

    @ma.validates("contentId")
    def content_id(self, value: str, **kwargs: Any) -> None:
        problem = content_id_problem(_without_brackets(value))
        if problem:
            raise ma.ValidationError(problem)

    @ma.post_load
    def make_attachment(self, data: dict[str, Any], **kwargs: Any) -> Attachment:
        content_id = _without_brackets(data["contentId"]) if "contentId" in data else None
        default = "attachment" if content_id is None else "inline"
        return Attachment(
            data["filename"],
            without_whitespace(data["value"]),
            data.get("mimeType"),
            content_id,
            data.get("disposition", default),
        )


def _without_brackets(content_id: str) -> str:
    if content_id.startswith("<") and content_id.endswith(">"):
        return content_id[1:-1]
    return content_id


class HeaderSchema(CompatSchema):
    name = fields.String(required=True, metadata={"description": "Header field name."})
    value = fields.String(
        required=True,
        validate=[validate.Length(max=MAX_HEADER_VALUE), no_line_breaks],
        metadata={"description": "Header value, no line breaks."},
    )

    @ma.validates("name")
    def allowed_name(self, value: str, **kwargs: Any) -> None:
        if not HEADER_NAME.match(value):
            raise ma.ValidationError("Not a valid header name.")
        if is_reserved_header(value):
            raise ma.ValidationError(f"{value} is set by the service and cannot be given.")

    @ma.validates_schema
    def well_formed(self, data: dict[str, Any], **kwargs: Any) -> None:
        # Runs only once name and value passed their own checks, so what is left is the value.
        try:
            check_header(data["name"], data["value"])
        except InvalidHeader as error:
            raise ma.ValidationError(str(error), "value") from None

    @ma.post_load
    def make_header(self, data: dict[str, Any], **kwargs: Any) -> Header:
        return Header(data["name"], data["value"])


class Metadata(fields.Field):
    """Any JSON object, or a list of objects merged into one (see
    :func:`layang.domain.intake.metadata_object`)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> Any:
        try:
            return metadata_object(value)
        except ValueError as error:
            raise ma.ValidationError(str(error)) from None


class OptionsAttributesSchema(CompatSchema):
    clickTracking = fields.Boolean(metadata={"description": "Track clicks on links."})
    openTracking = fields.Boolean(metadata={"description": "Track opens."})
    generateText = fields.Boolean(
        metadata={
            "description": "Default true: a message with bodyHtml and no bodyText gets a "
            "text/plain alternative made from the HTML (links kept as text). false: sent as "
            "HTML alone."
        }
    )
    transactional = fields.Boolean(
        metadata={
            "description": "Default true. false: the message gets one-click unsubscribe headers "
            "(List-Unsubscribe), and `unsubscribe` entries of the suppression list stop it."
        }
    )
    requireTls = fields.Boolean(
        metadata={
            "description": "REQUIRETLS (RFC 8689): deliver only over TLS verified by MTA-STS, "
            "DANE or the MX name's certificate, to servers that advertise REQUIRETLS; otherwise "
            "the message bounces (550 5.7.30). A `TLS-Required: No` header does the opposite: "
            "it relaxes the recipient domains' TLS policies."
        }
    )
    stream = fields.String(
        validate=validate.OneOf(STREAMS),
        metadata={
            "description": "transactional (default) or broadcast. Transactional mail is sent "
            "first; broadcast mail is not transactional (as `transactional: false`) and is "
            "the mail a paused account may not send."
        },
    )

    @ma.validates_schema
    def one_stream(self, data: dict[str, Any], **kwargs: Any) -> None:
        if data.get("stream") == TRANSACTIONAL and data.get("transactional") is False:
            raise ma.ValidationError(
                "transactional: false is the broadcast stream; give one or the other.", "stream"
            )


class RecipientSchema(AddressSchema):
    """A ``to`` entry: an address, and what is that recipient's alone."""

    verbatim = frozenset({"metadata"})

    substitutionData = fields.Dict(
        keys=fields.String(),
        metadata={
            "description": "Values for the template's shortcodes in this recipient's copy "
            "only, merged over the request's substitutionData (a key here wins)."
        },
    )
    metadata = Metadata(
        metadata={
            "type": "object",
            "description": "Merged over the request's metadata (a key here wins) on this "
            "recipient's record and webhook events only.",
        }
    )

    @ma.post_load
    def make_mailbox(self, data: dict[str, Any], **kwargs: Any) -> Any:
        mailbox = Mailbox(data["email"], data.get("name"))
        if "substitutionData" not in data and "metadata" not in data:
            return mailbox
        return RecipientData(mailbox, data.get("substitutionData", {}), data.get("metadata"))


def _addresses(description: str, **kwargs: Any) -> fields.List:
    return fields.List(
        fields.Nested(AddressSchema),
        metadata={"description": f"{description} One address may stand alone, not in a list."},
        **kwargs,
    )


ADDRESS_LISTS = ("to", "cc", "bcc", "replyTo")


def _epoch_ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _valid_tag(value: str) -> None:
    problem = tag_problem(value)
    if problem:
        raise ma.ValidationError(problem)


class TransmissionRequestSchema(CompatSchema):
    """The request body of a send; loads into a :class:`TransmissionRequest`."""

    verbatim = frozenset({"metadata"})

    from_ = fields.Nested(
        AddressSchema,
        required=True,
        data_key="from",
        metadata={"description": 'The sender; any address may also be a string, "Name <a@x>".'},
    )
    subject = fields.String(
        validate=[validate.Length(max=MAX_SUBJECT), no_line_breaks],
        metadata={
            "description": "Required unless the template has one; with templateId, rendered "
            "with substitutionData like the template's subject."
        },
    )
    to = fields.List(
        fields.Nested(RecipientSchema),
        required=True,
        metadata={
            "description": "Primary recipients, at least one. One address may stand alone, "
            "not in a list. An entry may carry its own substitutionData and metadata."
        },
    )
    replyTo = _addresses("Reply-To addresses.")
    cc = _addresses("Carbon-copy recipients.")
    bcc = _addresses("Blind-carbon-copy recipients: they get the mail, no header shows them.")
    bodyText = fields.String(
        metadata={"description": "Plain-text body; with templateId, only if the template has none."}
    )
    bodyHtml = fields.String(
        metadata={
            "description": "HTML body, a complete document; with templateId, only if the "
            "template has none."
        }
    )
    attachments = fields.List(
        fields.Nested(AttachmentSchema),
        validate=validate.Length(max=MAX_ATTACHMENTS, error=f"At most {MAX_ATTACHMENTS} files."),
        metadata={"description": f"Files (at most {MAX_ATTACHMENTS}); `attachment` is an alias."},
    )
    optionsAttributes = fields.Nested(OptionsAttributesSchema)
    headers = fields.List(
        fields.Nested(HeaderSchema),
        validate=validate.Length(max=MAX_HEADERS, error=f"At most {MAX_HEADERS} headers."),
        metadata={"description": f"Extra headers (at most {MAX_HEADERS})."},
    )
    metadata = Metadata(
        metadata={
            "type": "object",
            "description": "Any JSON object (at most 10 KB, 32 levels), kept verbatim with every "
            "activity record; a list of objects is merged into one, a later key winning.",
        }
    )
    templateId = fields.String(
        validate=validate.Length(max=64), metadata={"description": "A stored template's id."}
    )
    substitutionData = fields.Dict(
        keys=fields.String(), metadata={"description": "Values for the template's shortcodes."}
    )
    scheduledAt = fields.AwareDateTime(
        default_timezone=UTC,
        metadata={
            "description": "When to send (ISO 8601; without a zone, UTC): at most "
            f"{MAX_SCHEDULE_DAYS} days ahead; a time past means now. Until then every record "
            "is `Scheduled`, and the send may be cancelled or moved.",
            "example": "2026-12-01T09:00:00Z",
        },
    )
    tags = fields.List(
        fields.String(validate=_valid_tag),
        validate=validate.Length(max=MAX_TAGS, error=f"At most {MAX_TAGS} tags."),
        metadata={
            "description": f"At most {MAX_TAGS} labels of 1 to {MAX_TAG_LENGTH} characters, "
            "each kept once: on every record and webhook event of the message, an Activity "
            "filter (`tag=`) and the Overview's figures per tag.",
            "example": ["welcome", "onboarding"],
        },
    )

    @ma.pre_load
    def one_address(self, data: Any, **kwargs: Any) -> Any:
        """``"to": "a@x"`` (or one address object) is a list of one, as in the SDK."""
        if not isinstance(data, dict):
            return data
        single = [k for k in ADDRESS_LISTS if isinstance(data.get(k), str | dict)]
        return {**data, **{k: [data[k]] for k in single}} if single else data

    @ma.pre_load
    def attachment_alias(self, data: Any, **kwargs: Any) -> Any:
        if isinstance(data, dict) and "attachment" in data:
            data = strip_empty(data, self.verbatim)
            if "attachments" in data and "attachment" in data:
                raise ma.ValidationError("Give attachments or attachment, not both.", "attachment")
            if "attachment" in data:
                data["attachments"] = data.pop("attachment")
        return data

    @ma.validates_schema
    def content_and_recipients(self, data: dict[str, Any], **kwargs: Any) -> None:
        has_body = "bodyText" in data or "bodyHtml" in data
        if "templateId" not in data and not has_body:
            raise ma.ValidationError("Give bodyText and/or bodyHtml, or a templateId.", "bodyText")
        if "substitutionData" in data and "templateId" not in data:
            raise ma.ValidationError("substitutionData needs a templateId.", "substitutionData")
        if "templateId" not in data:
            for index, entry in enumerate(data["to"]):
                if isinstance(entry, RecipientData) and entry.substitution_data:
                    raise ma.ValidationError(
                        {
                            str(index): {
                                "substitutionData": ["substitutionData needs a templateId."]
                            }
                        },
                        "to",
                    )
        if "subject" not in data and "templateId" not in data:
            raise ma.ValidationError("Missing data for required field.", "subject")
        count = sum(len(data.get(kind, ())) for kind in ("to", "cc", "bcc"))
        if count > MAX_RECIPIENTS:
            raise ma.ValidationError(f"At most {MAX_RECIPIENTS} recipients in all.", "to")
        names = [header.name.lower() for header in data.get("headers", ())]
        if "reply-to" in names and "replyTo" in data:
            raise ma.ValidationError("Give replyTo or a Reply-To header, not both.", "headers")

    @ma.post_load
    def make_request(self, data: dict[str, Any], **kwargs: Any) -> TransmissionRequest:
        options = data.get("optionsAttributes", {})
        personal = tuple(entry for entry in data["to"] if isinstance(entry, RecipientData))
        message = OutgoingMessage(
            sender=data["from_"],
            subject=data.get("subject", ""),
            to=tuple(e.mailbox if isinstance(e, RecipientData) else e for e in data["to"]),
            cc=tuple(data.get("cc", ())),
            bcc=tuple(data.get("bcc", ())),
            reply_to=tuple(data.get("replyTo", ())),
            text=data.get("bodyText"),
            html=data.get("bodyHtml"),
            attachments=tuple(data.get("attachments", ())),
            headers=tuple(data.get("headers", ())),
            open_tracking=options.get("openTracking", False),
            click_tracking=options.get("clickTracking", False),
            transactional=False
            if options.get("stream") == BROADCAST
            else options.get("transactional"),
            require_tls=options.get("requireTls", False),
            generate_text=options.get("generateText", True),
        )
        return TransmissionRequest(
            message,
            template_id=data.get("templateId"),
            substitution_data=data.get("substitutionData", {}),
            metadata=data.get("metadata", {}),
            recipient_data=personal,
            tags=distinct_tags(data.get("tags", ())),
            scheduled_at=_epoch_ms(data.get("scheduledAt")),
        )


class TransmissionAcceptedSchema(ma.Schema):
    transmissionId = fields.String(
        required=True, metadata={"description": "Identifies the message in Activity."}
    )
    suppressed = fields.List(
        fields.String(),
        metadata={
            "description": "Only when some recipients are on the suppression list: those "
            "addresses. Each has a `Suppressed` record and is never sent to; the others are."
        },
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
    scheduled_at = Timestamp(
        data_key="scheduledAt",
        metadata={
            **ISO_8601,
            "description": "When a scheduled send is (or was) due; absent for one sent at once.",
        },
    )

    @ma.post_dump
    def _scheduled_only(self, data: dict[str, Any], **_: Any) -> dict[str, Any]:
        if data.get("scheduledAt") is None:
            data.pop("scheduledAt", None)
        return data


class TransmissionChangeSchema(CompatSchema):
    scheduledAt = fields.AwareDateTime(
        required=True,
        default_timezone=UTC,
        metadata={
            "description": f"The new time (ISO 8601): at most {MAX_SCHEDULE_DAYS} days ahead; "
            "a time past means now."
        },
    )


TRANSMISSION_SCHEMA = TransmissionRequestSchema()  # one instance: building it is costly


@blp.route("/transmissions")
class Transmissions(MethodView):
    @blp.arguments(TRANSMISSION_SCHEMA)
    @blp.response(200, TransmissionAcceptedSchema)
    @blp.alt_response(401, schema=ErrorSchema, description="Missing, unknown or revoked key.")
    @blp.alt_response(404, schema=ErrorSchema, description="Unknown templateId.")
    @blp.alt_response(413, schema=ErrorSchema, description="Message too large.")
    @blp.alt_response(415, schema=ErrorSchema, description="Body is not application/json.")
    @blp.alt_response(422, schema=ErrorSchema, description="Sandbox rule refused the message.")
    @blp.alt_response(429, schema=ErrorSchema, description="Over LAYANG_RATE_LIMIT.")
    def post(self, request: TransmissionRequest) -> flask.Response:
        """Send a message

        The answer comes only after the message is durably stored: from then on it is never lost.
        """
        config = current_app.config["LAYANG"]
        accepted = accept_transmission(g.account, request, config, current_claim())
        # The hottest endpoint answers a fixed shape: skip the schema dump (still documented).
        return current_app.response_class(accepted.answer(), mimetype="application/json")


class BatchRequestSchema(ma.Schema):
    messages = fields.List(
        fields.Raw(metadata={"type": "object"}),
        required=True,
        validate=validate.Length(min=1, max=MAX_BATCH, error=f"Give 1 to {MAX_BATCH} messages."),
        metadata={
            "description": f"1 to {MAX_BATCH} sends, each the body of `POST /transmissions`."
        },
    )


class BatchResultSchema(ma.Schema):
    transmissionId = fields.String(metadata={"description": "The message was stored."})
    suppressed = fields.List(fields.String())
    error = fields.String(metadata={"description": "Refused: the error code."})
    message = fields.String()
    status = fields.Integer(metadata={"description": "The status a send alone would get."})
    errors = fields.Dict()


class BatchAnswerSchema(ma.Schema):
    results = fields.List(
        fields.Nested(BatchResultSchema),
        metadata={
            "description": 'One per message, in order: `{"transmissionId"}` (and '
            "`suppressed`) or the error body a send alone would have got."
        },
    )


def _refusal(error: Exception) -> dict[str, Any]:
    if isinstance(error, ma.ValidationError):
        messages = error.messages
        if isinstance(messages, list):
            messages = {"_schema": messages}
        return ValidationFailed(first_error(messages), messages).body()
    if isinstance(error, LayangError):
        return describe(error).body()
    return as_api_error(error).body()  # a template store error


@blp.route("/transmissions/batch")
class TransmissionBatch(MethodView):
    @blp.arguments(BatchRequestSchema())
    @blp.response(200, BatchAnswerSchema)
    @blp.alt_response(401, schema=ErrorSchema, description="Missing, unknown or revoked key.")
    @blp.alt_response(413, schema=ErrorSchema, description="Request too large.")
    def post(self, batch: dict[str, Any]) -> flask.Response:
        """Send up to 500 messages

        Each message is checked and answered alone, in order: one refused does not refuse the
        others. Those accepted are stored together in one transaction, with the answer to the
        batch's Idempotency-Key.
        """
        config = current_app.config["LAYANG"]
        requests: list[TransmissionRequest | Exception] = []
        for item in batch["messages"]:
            try:
                requests.append(TRANSMISSION_SCHEMA.load(item))
            except ma.ValidationError as error:
                requests.append(error)
        prepared = prepare_batch(g.account, requests, config)
        results = [
            json.loads(item[0].answer()) if isinstance(item, tuple) else _refusal(item)
            for item in prepared
        ]
        body = json.dumps({"results": results}, separators=(",", ":"))
        claim = current_claim()
        answer = claim.answer_rows(200, body) if claim else ()
        store_batch(g.account, [item[1] for item in prepared if isinstance(item, tuple)], answer)
        return current_app.response_class(body, mimetype="application/json")


@blp.route("/transmissions/<transmission_id>")
class TransmissionById(MethodView):
    @blp.response(200, TransmissionSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such transmission here.")
    def get(self, transmission_id: str) -> TransmissionView:
        """Look up a sent message and every recipient's record"""
        return get_transmission_view(g.account, transmission_id)

    @blp.arguments(TransmissionChangeSchema())
    @blp.response(200, TransmissionSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such transmission here.")
    @blp.alt_response(409, schema=ErrorSchema, description="Sending started, or cancelled.")
    def patch(self, change: dict[str, Any], transmission_id: str) -> TransmissionView:
        """Move a scheduled send

        Only while every recipient is still `Scheduled`; answers the transmission.
        """
        when = schedule_time(_epoch_ms(change["scheduledAt"])) or now_ms()
        scheduled_sends.move(g.account, transmission_id, when)
        return get_transmission_view(g.account, transmission_id)


@blp.route("/transmissions/<transmission_id>/cancel")
class TransmissionCancel(MethodView):
    @blp.response(200, TransmissionSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such transmission here.")
    @blp.alt_response(409, schema=ErrorSchema, description="Sending started already.")
    def post(self, transmission_id: str) -> TransmissionView:
        """Cancel a scheduled send

        Every recipient still `Scheduled` becomes `Cancelled` and is never sent; answers the
        transmission. Once any recipient was released to be sent: 409.
        """
        scheduled_sends.cancel(g.account, transmission_id)
        return get_transmission_view(g.account, transmission_id)
