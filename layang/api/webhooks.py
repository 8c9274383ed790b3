"""``/v1/layang/webhooks``: endpoints that receive the account's events, and their attempts."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint, service_config
from layang.api.fields import (
    ISO_8601,
    CompatSchema,
    CursorQuerySchema,
    ErrorSchema,
    Timestamp,
    page_schema,
)
from layang.domain.webhooks import (
    ALL_EVENTS,
    Attempt,
    Endpoint,
    create_endpoint,
    delete_endpoint,
    get_endpoint,
    list_attempts,
    list_endpoints,
    rotate_secret,
    send_test,
    update_endpoint,
)
from layang.models import WEBHOOK_EVENT_TYPES
from layang.pagination import Page

blp = Blueprint(
    "webhooks",
    __name__,
    description="Webhooks: every event pushed to your endpoint, signed (Standard Webhooks).",
)

_EVENT_TYPES = [ALL_EVENTS, *WEBHOOK_EVENT_TYPES]


def _url_field(**options: Any) -> fields.String:
    return fields.String(
        validate=validate.Length(min=1, max=2000),
        metadata={"description": "An https:// URL resolving to a public address."},
        **options,
    )


def _events_field(**options: Any) -> fields.List:
    return fields.List(
        fields.String(validate=validate.OneOf(_EVENT_TYPES)),
        validate=validate.Length(min=1, max=len(_EVENT_TYPES)),
        metadata={"description": f"Event types to receive: {', '.join(_EVENT_TYPES)}."},
        **options,
    )


class EndpointInSchema(CompatSchema):
    url = _url_field(required=True)
    events = _events_field(required=True)
    description = fields.String(validate=validate.Length(max=500), load_default="")


class EndpointPatchSchema(CompatSchema):
    url = _url_field()
    events = _events_field()
    enabled = fields.Boolean(
        truthy={True},
        falsy={False},
        metadata={"description": "false stops deliveries; true resumes them."},
    )
    description = fields.String(validate=validate.Length(max=500))


class EndpointSchema(ma.Schema):
    """Dumps a :class:`layang.domain.webhooks.Endpoint`."""

    id = fields.String()
    url = fields.String()
    description = fields.String()
    events = fields.List(fields.String())
    enabled = fields.Boolean()
    disabled_at = Timestamp(allow_none=True, data_key="disabledAt", metadata=ISO_8601)
    disabled_reason = fields.String(allow_none=True, data_key="disabledReason")
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)
    updated_at = Timestamp(data_key="updatedAt", metadata=ISO_8601)


class EndpointWithSecretSchema(EndpointSchema):
    secret = fields.String(
        metadata={"description": "whsec_…: verifies the signatures; shown only in this answer."}
    )


class AttemptSchema(ma.Schema):
    """Dumps a :class:`layang.domain.webhooks.Attempt`."""

    id = fields.String()
    event_ids = fields.List(fields.String(), data_key="eventIds")
    status = fields.String(
        metadata={"description": "delivered, pending (will be retried) or failed (given up)."}
    )
    response_status = fields.Integer(allow_none=True, data_key="responseStatus")
    error = fields.String(
        allow_none=True, metadata={"description": "What went wrong, or the answer's first 4 KB."}
    )
    attempted_at = Timestamp(data_key="attemptedAt", metadata=ISO_8601)
    next_attempt_at = Timestamp(allow_none=True, data_key="nextAttemptAt", metadata=ISO_8601)


class TestQueuedSchema(ma.Schema):
    event_id = fields.String(data_key="eventId")


EndpointListSchema = page_schema(EndpointSchema, "WebhookEndpointListSchema")
AttemptListSchema = page_schema(AttemptSchema, "WebhookAttemptListSchema")


@blp.route("/webhooks")
class Webhooks(MethodView):
    @blp.arguments(CursorQuerySchema(), location="query")
    @blp.response(200, EndpointListSchema)
    def get(self, query: dict[str, Any]) -> Page[Endpoint]:
        """List webhook endpoints, newest first"""
        return list_endpoints(g.account, limit=query["limit"], cursor=query.get("cursor"))

    @blp.arguments(EndpointInSchema())
    @blp.response(201, EndpointWithSecretSchema)
    def post(self, data: dict[str, Any]) -> Endpoint:
        """Add a webhook endpoint

        The answer holds its `secret`, shown only here: keep it to verify signatures.
        """
        return create_endpoint(
            g.account, data["url"], data["events"], data["description"], service_config()
        )


@blp.route("/webhooks/<endpoint_id>")
class WebhookById(MethodView):
    @blp.response(200, EndpointSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such endpoint in this account.")
    def get(self, endpoint_id: str) -> Endpoint:
        """Get a webhook endpoint (never its secret)"""
        return get_endpoint(g.account, endpoint_id)

    @blp.arguments(EndpointPatchSchema())
    @blp.response(200, EndpointSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such endpoint in this account.")
    def patch(self, data: dict[str, Any], endpoint_id: str) -> Endpoint:
        """Change a webhook endpoint's URL, events or enabled state"""
        return update_endpoint(g.account, endpoint_id, service_config(), **data)

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="No such endpoint in this account.")
    def delete(self, endpoint_id: str) -> None:
        """Delete a webhook endpoint and what it has not received"""
        delete_endpoint(g.account, endpoint_id)


@blp.route("/webhooks/<endpoint_id>/rotate-secret")
class RotateSecret(MethodView):
    @blp.response(200, EndpointWithSecretSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such endpoint in this account.")
    def post(self, endpoint_id: str) -> Endpoint:
        """Rotate the signing secret

        The answer holds the new `secret`; for 24 hours both secrets sign every request.
        """
        return rotate_secret(g.account, endpoint_id, service_config())


@blp.route("/webhooks/<endpoint_id>/test")
class SendTest(MethodView):
    @blp.response(202, TestQueuedSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such endpoint in this account.")
    def post(self, endpoint_id: str) -> dict[str, str]:
        """Queue a test event to this endpoint"""
        return {"event_id": send_test(g.account, endpoint_id)}


@blp.route("/webhooks/<endpoint_id>/deliveries")
class Deliveries(MethodView):
    @blp.arguments(CursorQuerySchema(), location="query")
    @blp.response(200, AttemptListSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such endpoint in this account.")
    def get(self, query: dict[str, Any], endpoint_id: str) -> Page[Attempt]:
        """List delivery attempts, newest first"""
        return list_attempts(
            g.account, endpoint_id, limit=query["limit"], cursor=query.get("cursor")
        )
