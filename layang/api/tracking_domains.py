"""``/v1/layang/tracking-domains``: an account's own domain for its tracked links and pixel."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import g
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint, service_config
from layang.api.fields import ISO_8601, CompatSchema, ErrorSchema, Timestamp
from layang.domain.tracking_domains import (
    TrackingDomainState,
    create_tracking_domain,
    delete_tracking_domain,
    get_tracking_domain,
    list_tracking_domains,
    verify_tracking_domain,
)

blp = Blueprint(
    "tracking_domains",
    __name__,
    description="Tracking domains: your own domain for tracked links and the open pixel, "
    "published as a CNAME to the service, served over HTTPS by the operator's TLS proxy.",
)


class TrackingDomainInSchema(CompatSchema):
    domain = fields.String(
        required=True,
        validate=validate.Length(min=1, max=253),
        metadata={
            "description": "A name of yours, e.g. links.shop.example.",
            "example": "links.shop.example",
        },
    )


class CnameRecordSchema(ma.Schema):
    purpose = fields.String(metadata={"description": "tracking."})
    type = fields.String(metadata={"description": "CNAME."})
    name = fields.String(metadata={"description": "The tracking domain."})
    value = fields.String(metadata={"description": "The service's public host: publish this."})


class TrackingDomainSchema(ma.Schema):
    """Dumps a :class:`layang.domain.tracking_domains.TrackingDomainState`."""

    domain = fields.String()
    status = fields.String(
        metadata={
            "description": "pending, then verified once the CNAME is found: from then on the "
            "account's tracked links and pixel use https://<domain>/."
        }
    )
    records = fields.List(fields.Nested(CnameRecordSchema))
    found = fields.String(
        allow_none=True,
        metadata={"description": "What DNS answered at the last check, or why nothing."},
    )
    checked_at = Timestamp(allow_none=True, data_key="checkedAt", metadata=ISO_8601)
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)


class TrackingDomainListSchema(ma.Schema):
    items = fields.List(fields.Nested(TrackingDomainSchema))


@blp.route("/tracking-domains")
class TrackingDomains(MethodView):
    @blp.response(200, TrackingDomainListSchema)
    def get(self) -> dict[str, Any]:
        """List tracking domains, by name"""
        return {"items": list_tracking_domains(g.account, service_config())}

    @blp.arguments(TrackingDomainInSchema())
    @blp.response(201, TrackingDomainSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="Added already, or 20 already.")
    def post(self, data: dict[str, Any]) -> TrackingDomainState:
        """Add a tracking domain

        It starts `pending`: publish its CNAME `records`, then verify.
        """
        return create_tracking_domain(g.account, data["domain"], service_config())


@blp.route("/tracking-domains/<domain>")
class TrackingDomainByName(MethodView):
    @blp.response(200, TrackingDomainSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def get(self, domain: str) -> TrackingDomainState:
        """Get a tracking domain, as of its last check"""
        return get_tracking_domain(g.account, domain, service_config())

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def delete(self, domain: str) -> None:
        """Remove a tracking domain: new links use the service's host again"""
        delete_tracking_domain(g.account, domain)


@blp.route("/tracking-domains/<domain>/verify")
class TrackingDomainVerify(MethodView):
    @blp.response(200, TrackingDomainSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    @blp.alt_response(409, schema=ErrorSchema, description="Another account verified it.")
    def post(self, domain: str) -> TrackingDomainState:
        """Check the CNAME in DNS now

        `verified` once the domain is a CNAME of the service's public host.
        """
        return verify_tracking_domain(g.account, domain, service_config())
