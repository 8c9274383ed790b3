"""``/v1/layang/inbound``: inbound domains and routes, and the mail they received."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import marshmallow as ma
from flask import Response, g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint, service_config
from layang.api.domains import DnsRecordSchema
from layang.api.fields import (
    ISO_8601,
    CompatSchema,
    CursorQuerySchema,
    ErrorSchema,
    Timestamp,
    page_schema,
)
from layang.domain.inbound_mail import (
    STATUSES,
    InboundMessage,
    attachment,
    get_message,
    list_messages,
    raw_message,
    retry_message,
)
from layang.domain.inbound_routing import (
    InboundDomainState,
    Route,
    create_domain,
    create_route,
    delete_domain,
    delete_route,
    get_domain,
    get_route,
    list_domains,
    list_routes,
    rotate_route_secret,
    update_route,
    verify_domain,
)
from layang.models import INBOUND_ACTIONS
from layang.pagination import Page

blp = Blueprint(
    "inbound",
    __name__,
    description="Inbound routing: mail to your domains, posted to your endpoint as signed JSON.",
)


class InboundDomainInSchema(CompatSchema):
    domain = fields.String(required=True, validate=validate.Length(min=1, max=253))


class InboundDomainSchema(ma.Schema):
    """Dumps a :class:`layang.domain.inbound_routing.InboundDomainState`."""

    domain = fields.String()
    status = fields.String(metadata={"description": "pending, or verified once the MX is found."})
    records = fields.List(
        fields.Nested(DnsRecordSchema), metadata={"description": "The MX record to publish."}
    )
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)
    checked_at = Timestamp(allow_none=True, data_key="checkedAt", metadata=ISO_8601)
    verified_at = Timestamp(allow_none=True, data_key="verifiedAt", metadata=ISO_8601)


def _spam_threshold_field() -> fields.Float:
    return fields.Float(
        data_key="spamThreshold",
        allow_none=True,
        allow_nan=False,
        validate=validate.Range(min=0, max=100),
        metadata={
            "description": "Mail whose SpamAssassin score reaches this is held, not posted "
            "(scored only with LAYANG_SPAMD)."
        },
    )


class RouteInSchema(CompatSchema):
    match = fields.String(
        required=True,
        validate=validate.Length(min=3, max=320),
        metadata={"description": "support@in.example.com, or *@in.example.com for any address."},
    )
    action = fields.String(required=True, validate=validate.OneOf(INBOUND_ACTIONS))
    url = fields.String(
        validate=validate.Length(min=1, max=2000),
        metadata={"description": "Where a webhook route posts: https:// to a public address."},
    )
    spam_threshold = _spam_threshold_field()


class RoutePatchSchema(CompatSchema):
    url = fields.String(validate=validate.Length(min=1, max=2000))
    spam_threshold = _spam_threshold_field()


class RouteSchema(ma.Schema):
    """Dumps a :class:`layang.domain.inbound_routing.Route`."""

    id = fields.String()
    match = fields.String()
    action = fields.String(metadata={"description": "webhook, hold or reject."})
    url = fields.String(allow_none=True)
    spam_threshold = fields.Float(allow_none=True, data_key="spamThreshold")
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)


class RouteWithSecretSchema(RouteSchema):
    secret = fields.String(
        allow_none=True,
        metadata={"description": "whsec_…: verifies the signatures; shown only in this answer."},
    )


InboundDomainListSchema = page_schema(InboundDomainSchema, "InboundDomainListSchema")
RouteListSchema = page_schema(RouteSchema, "InboundRouteListSchema")


@blp.route("/inbound/domains")
class InboundDomains(MethodView):
    @blp.arguments(CursorQuerySchema(), location="query")
    @blp.response(200, InboundDomainListSchema)
    def get(self, query: dict[str, Any]) -> Page[InboundDomainState]:
        """List inbound domains, newest first"""
        return list_domains(
            g.account, service_config(), limit=query["limit"], cursor=query.get("cursor")
        )

    @blp.arguments(InboundDomainInSchema())
    @blp.response(201, InboundDomainSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="Added already, or another's.")
    def post(self, data: dict[str, Any]) -> InboundDomainState:
        """Add an inbound domain

        The answer lists the MX record to publish; then call `verify`.
        """
        return create_domain(g.account, data["domain"], service_config())


@blp.route("/inbound/domains/<domain>")
class InboundDomainByName(MethodView):
    @blp.response(200, InboundDomainSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def get(self, domain: str) -> InboundDomainState:
        """Get an inbound domain, as of its last check"""
        return get_domain(g.account, domain, service_config())

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def delete(self, domain: str) -> None:
        """Delete an inbound domain and its routes (mail received stays)"""
        delete_domain(g.account, domain)


@blp.route("/inbound/domains/<domain>/verify")
class VerifyInboundDomain(MethodView):
    @blp.response(200, InboundDomainSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    @blp.alt_response(409, schema=ErrorSchema, description="Another account verified it.")
    def post(self, domain: str) -> InboundDomainState:
        """Check the MX record in DNS now

        The domain is `verified` (and its mail accepted) once its MX names the inbound host.
        """
        return verify_domain(g.account, domain, service_config())


@blp.route("/inbound/routes")
class Routes(MethodView):
    @blp.arguments(CursorQuerySchema(), location="query")
    @blp.response(200, RouteListSchema)
    def get(self, query: dict[str, Any]) -> Page[Route]:
        """List inbound routes, newest first"""
        return list_routes(g.account, limit=query["limit"], cursor=query.get("cursor"))

    @blp.arguments(RouteInSchema())
    @blp.response(201, RouteWithSecretSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="A route has this match already.")
    def post(self, data: dict[str, Any]) -> Route:
        """Add an inbound route

        A `webhook` route's answer holds its `secret`, shown only here.
        """
        return create_route(
            g.account,
            data["match"],
            data["action"],
            data.get("url"),
            data.get("spam_threshold"),
            service_config(),
        )


@blp.route("/inbound/routes/<route_id>")
class RouteById(MethodView):
    @blp.response(200, RouteSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such route in this account.")
    def get(self, route_id: str) -> Route:
        """Get an inbound route (never its secret)"""
        return get_route(g.account, route_id)

    @blp.arguments(RoutePatchSchema())
    @blp.response(200, RouteSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such route in this account.")
    def patch(self, data: dict[str, Any], route_id: str) -> Route:
        """Change a route's URL or spam threshold"""
        return update_route(
            g.account,
            route_id,
            service_config(),
            url=data.get("url"),
            spam_threshold=data.get("spam_threshold"),
        )

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="No such route in this account.")
    def delete(self, route_id: str) -> None:
        """Delete an inbound route (mail received stays)"""
        delete_route(g.account, route_id)


@blp.route("/inbound/routes/<route_id>/rotate-secret")
class RotateRouteSecret(MethodView):
    @blp.response(200, RouteWithSecretSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such route in this account.")
    def post(self, route_id: str) -> Route:
        """Rotate a webhook route's signing secret

        The answer holds the new `secret`; for 24 hours both secrets sign every request.
        """
        return rotate_route_secret(g.account, route_id, service_config())


class InboundAttemptSchema(ma.Schema):
    """Dumps a :class:`layang.domain.inbound_mail.InboundAttempt`."""

    id = fields.String()
    webhook_id = fields.String(data_key="webhookId")
    status = fields.String(metadata={"description": "delivered, pending or failed."})
    response_status = fields.Integer(allow_none=True, data_key="responseStatus")
    error = fields.String(allow_none=True)
    attempted_at = Timestamp(data_key="attemptedAt", metadata=ISO_8601)
    next_attempt_at = Timestamp(allow_none=True, data_key="nextAttemptAt", metadata=ISO_8601)


class InboundMessageSchema(ma.Schema):
    """Dumps a :class:`layang.domain.inbound_mail.InboundMessage`."""

    id = fields.String()
    route_id = fields.String(allow_none=True, data_key="routeId")
    route_match = fields.String(data_key="routeMatch")
    action = fields.String()
    status = fields.String(
        metadata={"description": "held, or its post's: pending, delivered or failed."}
    )
    note = fields.String(allow_none=True, metadata={"description": "Why it was held, if so."})
    received_at = Timestamp(data_key="receivedAt", metadata=ISO_8601)
    mail_from = fields.String(data_key="mailFrom")
    rcpt_to = fields.List(fields.String(), data_key="rcptTo")
    size = fields.Integer(metadata={"description": "Bytes, as received."})
    spam_score = fields.Float(allow_none=True, data_key="spamScore")
    message = fields.Dict(
        metadata={"description": "The JSON posted (attachments without their content)."}
    )


class InboundMessageWithAttemptsSchema(InboundMessageSchema):
    attempts = fields.List(fields.Nested(InboundAttemptSchema))


class MessageQuerySchema(CursorQuerySchema):
    route = fields.String(validate=validate.Length(max=26))
    status = fields.String(validate=validate.OneOf(STATUSES))
    sender = fields.String(
        validate=validate.Length(max=512), metadata={"description": "The envelope sender."}
    )
    recipient = fields.String(validate=validate.Length(max=320))


MessageListSchema = page_schema(InboundMessageSchema, "InboundMessageListSchema")


@blp.route("/inbound/messages")
class InboundMessages(MethodView):
    @blp.arguments(MessageQuerySchema(), location="query")
    @blp.response(200, MessageListSchema)
    def get(self, query: dict[str, Any]) -> Page[InboundMessage]:
        """List received mail, newest first"""
        return list_messages(
            g.account,
            limit=query["limit"],
            cursor=query.get("cursor"),
            route_id=query.get("route"),
            status=query.get("status"),
            sender=query.get("sender"),
            recipient=query.get("recipient"),
        )


@blp.route("/inbound/messages/<message_id>")
class InboundMessageById(MethodView):
    @blp.response(200, InboundMessageWithAttemptsSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such message in this account.")
    def get(self, message_id: str) -> InboundMessage:
        """Get a received message, with every attempt to post it"""
        return get_message(g.account, message_id)


@blp.route("/inbound/messages/<message_id>/raw")
class InboundMessageRaw(MethodView):
    @blp.response(200, content_type="message/rfc822")
    @blp.alt_response(404, schema=ErrorSchema, description="No such message in this account.")
    def get(self, message_id: str) -> Response:
        """Get a received message exactly as received"""
        return Response(raw_message(g.account, message_id), mimetype="message/rfc822")


@blp.route("/inbound/messages/<message_id>/attachments/<index>")
class InboundAttachment(MethodView):
    @blp.response(200, content_type="application/octet-stream")
    @blp.alt_response(404, schema=ErrorSchema, description="No such attachment.")
    def get(self, message_id: str, index: str) -> Response:
        """Download an attachment (those too large to be posted inline)

        `index` counts from 0, in the order of the message's `attachments`.
        """
        number = int(index) if index.isdigit() else -1
        filename, content_type, content = attachment(g.account, message_id, number)
        response = Response(content, mimetype=content_type or "application/octet-stream")
        response.headers["Content-Disposition"] = _disposition(filename)
        return response


@blp.route("/inbound/messages/<message_id>/retry")
class RetryInboundMessage(MethodView):
    @blp.response(202, InboundMessageWithAttemptsSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such message in this account.")
    def post(self, message_id: str) -> InboundMessage:
        """Post a received message to its route's endpoint again, now"""
        return retry_message(g.account, message_id)


def _disposition(filename: str) -> str:
    if not filename:
        return "attachment"
    ascii_name = filename.encode("ascii", "replace").decode().replace('"', "")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"
