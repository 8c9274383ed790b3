"""``/v1/layang/templates``: stored templates with shortcodes, versioned, with ETags."""

from __future__ import annotations

from typing import Any

import flask
import marshmallow as ma
from flask import g, request
from flask.views import MethodView
from marshmallow import fields, validate

import templates_store
from layang.api import Blueprint
from layang.api.fields import CursorQuerySchema, ErrorSchema
from layang.domain.errors import PreconditionFailed

blp = Blueprint("templates", __name__, description="Stored templates with shortcodes.")

_PART = {"validate": validate.Length(max=5 * 1024 * 1024), "allow_none": True}


class TemplateInSchema(ma.Schema):
    id = fields.String(
        validate=validate.Regexp(
            r"^[a-z0-9][a-z0-9_-]{0,63}$",
            error="Use 1-64 of a-z, 0-9, '_' and '-', starting with a letter or digit.",
        ),
        metadata={"description": "Your id for the template; generated when absent."},
    )
    name = fields.String(required=True, validate=validate.Length(min=1, max=200))
    subject = fields.String(**_PART, metadata={"description": "May use shortcodes."})
    bodyHtml = fields.String(**_PART, metadata={"description": "CSS is inlined on save."})
    bodyText = fields.String(**_PART)


class TemplateUpdateSchema(TemplateInSchema):
    """Fields left out keep their value; null removes a part."""

    class Meta:
        exclude = ("id",)

    name = fields.String(validate=validate.Length(min=1, max=200))


class TemplateSchema(ma.Schema):
    id = fields.String()
    name = fields.String()
    subject = fields.String(allow_none=True)
    bodyHtml = fields.String(allow_none=True)
    bodyText = fields.String(allow_none=True)
    version = fields.Integer()
    shortcodes = fields.List(fields.String(), metadata={"description": "Placeholders used."})
    createdAt = fields.String()
    updatedAt = fields.String()


class TemplateListSchema(ma.Schema):
    items = fields.List(fields.Nested(TemplateSchema))
    nextCursor = fields.String(allow_none=True)


class PreviewSchema(ma.Schema):
    substitutionData = fields.Dict(keys=fields.String(), load_default=dict)


class RenderedSchema(ma.Schema):
    subject = fields.String(allow_none=True)
    bodyHtml = fields.String(allow_none=True)
    bodyText = fields.String(allow_none=True)


def _with_etag(record: templates_store.TemplateRecord) -> flask.Response:
    response = flask.jsonify(record.to_dict())
    response.headers["ETag"] = record.etag
    return response


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
    def get(self, query: dict[str, Any]) -> dict[str, Any]:
        """List templates, by id"""
        records, cursor = templates_store.list_templates(
            g.account.id, limit=query["limit"], after=query.get("cursor")
        )
        return {"items": [r.to_dict() for r in records], "nextCursor": cursor}

    @blp.arguments(TemplateInSchema())
    @blp.response(201, TemplateSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="A template with this id exists.")
    def post(self, data: dict[str, Any]) -> flask.Response:
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
        response = _with_etag(record)
        response.status_code = 201
        return response


@blp.route("/templates/<template_id>")
class TemplateById(MethodView):
    @blp.response(200, TemplateSchema, headers={"ETag": {"schema": {"type": "string"}}})
    @blp.alt_response(404, schema=ErrorSchema, description="No such template.")
    def get(self, template_id: str) -> flask.Response:
        """Get a template, with its ETag"""
        return _with_etag(templates_store.get_template(g.account.id, template_id))

    @blp.arguments(TemplateUpdateSchema())
    @blp.response(200, TemplateSchema)
    @blp.alt_response(412, schema=ErrorSchema, description="If-Match is stale.")
    def put(self, data: dict[str, Any], template_id: str) -> flask.Response:
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
        return _with_etag(record)

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="No such template.")
    def delete(self, template_id: str) -> None:
        """Delete a template and its versions"""
        templates_store.delete_template(g.account.id, template_id)


@blp.route("/templates/<template_id>/preview")
class TemplatePreview(MethodView):
    @blp.arguments(PreviewSchema())
    @blp.response(200, RenderedSchema)
    def post(self, data: dict[str, Any], template_id: str) -> dict[str, Any]:
        """Render the current version as it would be sent (without tracking)"""
        rendered = templates_store.preview(g.account.id, template_id, data["substitutionData"])
        return {
            "subject": rendered.subject,
            "bodyHtml": rendered.body_html,
            "bodyText": rendered.body_text,
        }
