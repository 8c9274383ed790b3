"""``/v1/layang/templates``: stored templates with shortcodes, versioned, with ETags."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import g, request
from flask.views import MethodView
from marshmallow import fields, validate

import templates_store
from layang.api import Blueprint
from layang.api.errors import PreconditionFailed
from layang.api.fields import (
    ISO_8601,
    CursorQuerySchema,
    ErrorSchema,
    RequestBodySchema,
    Timestamp,
    page_schema,
)
from templates_store import ID_PATTERN, MAX_NAME_LENGTH, RenderLimits

blp = Blueprint("templates", __name__, description="Stored templates with shortcodes.")

# flask-smorest sets the headers of a view that returns (body, headers).
TemplateWithEtag = tuple[templates_store.TemplateRecord, dict[str, str]]

# A source part may be as long as a rendered one.
_PART = {"validate": validate.Length(max=RenderLimits().max_part_chars), "allow_none": True}


class TemplateInSchema(RequestBodySchema):
    id = fields.String(
        validate=validate.Regexp(
            rf"^{ID_PATTERN.pattern}$",
            error="Use 1-64 of a-z, 0-9, '_' and '-', starting with a letter or digit.",
        ),
        metadata={
            "description": "Your id for the template; generated when absent.",
            "example": "order-shipped",
        },
    )
    name = fields.String(required=True, validate=validate.Length(min=1, max=MAX_NAME_LENGTH))
    subject = fields.String(**_PART, metadata={"description": "May use shortcodes."})
    bodyHtml = fields.String(**_PART, metadata={"description": "CSS is inlined on save."})
    bodyText = fields.String(**_PART)


class TemplateUpdateSchema(TemplateInSchema):
    """Fields left out keep their value; null removes a part."""

    class Meta:
        exclude = ("id",)

    name = fields.String(validate=validate.Length(min=1, max=MAX_NAME_LENGTH))


class TemplateSchema(ma.Schema):
    """Dumps a :class:`templates_store.TemplateRecord`."""

    id = fields.String()
    name = fields.String()
    subject = fields.String(allow_none=True)
    body_html = fields.String(
        allow_none=True, data_key="bodyHtml", metadata={"description": "As you sent it."}
    )
    body_text = fields.String(allow_none=True, data_key="bodyText")
    version = fields.Integer(metadata={"description": "1 on creation, +1 on every update."})
    shortcodes = fields.List(fields.String(), metadata={"description": "Placeholders used."})
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)
    updated_at = Timestamp(data_key="updatedAt", metadata=ISO_8601)


TemplateListSchema = page_schema(TemplateSchema, "TemplateListSchema")

_ETAG_HEADER = {"ETag": {"schema": {"type": "string"}, "description": "Send it as If-Match."}}


class PreviewSchema(RequestBodySchema):
    substitutionData = fields.Dict(keys=fields.String(), load_default=dict)


class RenderedSchema(ma.Schema):
    """Dumps a :class:`templates_store.RenderedContent`."""

    subject = fields.String(allow_none=True)
    body_html = fields.String(allow_none=True, data_key="bodyHtml")
    body_text = fields.String(allow_none=True, data_key="bodyText")


def _etag(record: templates_store.TemplateRecord) -> dict[str, str]:
    return {"ETag": record.etag}


def _if_match_version(template_id: str) -> int | None:
    """The version an ``If-Match`` header insists on; None when absent or ``*``."""
    header = request.headers.get("If-Match")
    if header is None or header.strip() == "*":
        return None
    for tag in header.split(","):
        version = templates_store.version_from_etag(tag, template_id)
        if version is not None:
            return version
    raise PreconditionFailed("If-Match does not match the template's current ETag.")


@blp.route("/templates")
class Templates(MethodView):
    @blp.arguments(CursorQuerySchema(), location="query")
    @blp.response(200, TemplateListSchema)
    def get(self, query: dict[str, Any]) -> templates_store.TemplatePage:
        """List templates, by id"""
        return templates_store.list_templates(
            g.account.id, limit=query["limit"], after=query.get("cursor")
        )

    @blp.arguments(TemplateInSchema())
    @blp.response(201, TemplateSchema, headers=_ETAG_HEADER)
    @blp.alt_response(409, schema=ErrorSchema, description="A template with this id exists.")
    def post(self, data: dict[str, Any]) -> TemplateWithEtag:
        """Create a template

        A template that does not parse is a 400 naming the part and the line.
        """
        record = templates_store.create_template(
            g.account.id,
            template_id=data.get("id"),
            name=data["name"],
            subject=data.get("subject"),
            body_html=data.get("bodyHtml"),
            body_text=data.get("bodyText"),
        )
        return record, _etag(record)


@blp.route("/templates/<template_id>")
class TemplateById(MethodView):
    @blp.response(200, TemplateSchema, headers=_ETAG_HEADER)
    @blp.alt_response(404, schema=ErrorSchema, description="No such template.")
    def get(self, template_id: str) -> TemplateWithEtag:
        """Get a template, with its ETag"""
        record = templates_store.get_template(g.account.id, template_id)
        return record, _etag(record)

    @blp.arguments(TemplateUpdateSchema())
    @blp.response(200, TemplateSchema, headers=_ETAG_HEADER)
    @blp.alt_response(412, schema=ErrorSchema, description="If-Match is stale.")
    def put(self, data: dict[str, Any], template_id: str) -> TemplateWithEtag:
        """Update a template: a new version

        Send `If-Match` with the ETag you read to refuse (412) an update made meanwhile.
        """
        changes = {
            field: data[key]
            for key, field in (
                ("name", "name"),
                ("subject", "subject"),
                ("bodyHtml", "body_html"),
                ("bodyText", "body_text"),
            )
            if key in data
        }
        record = templates_store.update_template(
            g.account.id, template_id, if_match_version=_if_match_version(template_id), **changes
        )
        return record, _etag(record)

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="No such template.")
    def delete(self, template_id: str) -> None:
        """Delete a template and its versions"""
        templates_store.delete_template(g.account.id, template_id)


@blp.route("/templates/<template_id>/preview")
class TemplatePreview(MethodView):
    @blp.arguments(PreviewSchema())
    @blp.response(200, RenderedSchema)
    def post(self, data: dict[str, Any], template_id: str) -> templates_store.RenderedContent:
        """Render the current version as it would be sent (without tracking)"""
        return templates_store.preview(g.account.id, template_id, data["substitutionData"])
