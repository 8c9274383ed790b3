"""``/v1/layang/domains``: sending domains, the DNS records to publish, and their DKIM keys."""

from __future__ import annotations

from datetime import UTC, date, datetime
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
from layang.domain.compliance import Compliance, check_compliance
from layang.domain.dmarc import DmarcFigures, dmarc_figures
from layang.domain.sending_domains import (
    DomainState,
    create_domain,
    delete_domain,
    delete_key,
    get_domain,
    list_domains,
    rotate_key,
    verify_domain,
)
from layang.pagination import Page

blp = Blueprint(
    "domains",
    __name__,
    description="Sending domains: the DNS records to publish, checked in DNS, and DKIM keys.",
)


class DomainInSchema(CompatSchema):
    domain = fields.String(required=True, validate=validate.Length(min=1, max=253))
    return_path_domain = fields.String(
        data_key="returnPathDomain",
        validate=validate.Length(min=1, max=253),
        metadata={"description": "Where bounces come back; a subdomain, `bounces.<domain>`."},
    )


class DnsRecordSchema(ma.Schema):
    purpose = fields.String(metadata={"description": "dkim, spf, dmarc or return-path."})
    type = fields.String(metadata={"description": "TXT, MX or CNAME."})
    name = fields.String()
    value = fields.String(
        metadata={"description": "Publish this; a long TXT value whole or in 255-byte strings."}
    )
    status = fields.String(metadata={"description": "ok, missing or mismatch, as last checked."})
    found = fields.String(
        allow_none=True,
        metadata={"description": "What DNS answered, or why nothing; null before any check."},
    )


class DkimKeySchema(ma.Schema):
    """Dumps a :class:`layang.models.DkimKey` (never its private key)."""

    selector = fields.String()
    algorithm = fields.String()
    bits = fields.Integer()
    status = fields.String(
        metadata={"description": "active (signs), pending (record not found yet) or retired."}
    )


class DomainSchema(ma.Schema):
    """Dumps a :class:`layang.domain.sending_domains.DomainState`."""

    domain = fields.String()
    status = fields.String(metadata={"description": "pending, then verified once DKIM matches."})
    return_path_domain = fields.String(data_key="returnPathDomain")
    records = fields.List(fields.Nested(DnsRecordSchema))
    dkim = fields.List(fields.Nested(DkimKeySchema))
    checked_at = Timestamp(
        allow_none=True,
        data_key="checkedAt",
        metadata={**ISO_8601, "description": "When DNS was last checked; null until then."},
    )
    created_at = Timestamp(data_key="createdAt", metadata=ISO_8601)


DomainListSchema = page_schema(DomainSchema, "DomainListSchema")


@blp.route("/domains")
class Domains(MethodView):
    @blp.arguments(CursorQuerySchema(), location="query")
    @blp.response(200, DomainListSchema)
    def get(self, query: dict[str, Any]) -> Page[DomainState]:
        """List sending domains, newest first"""
        return list_domains(
            g.account, service_config(), limit=query["limit"], cursor=query.get("cursor")
        )

    @blp.arguments(DomainInSchema())
    @blp.response(201, DomainSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="The domain is already added.")
    def post(self, data: dict[str, Any]) -> DomainState:
        """Add a sending domain

        It starts `pending` with a fresh RSA-2048 DKIM key; publish its `records`, then verify.
        """
        return create_domain(
            g.account, data["domain"], data.get("return_path_domain"), service_config()
        )


@blp.route("/domains/<domain>")
class DomainByName(MethodView):
    @blp.response(200, DomainSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def get(self, domain: str) -> DomainState:
        """Get a sending domain, as of its last check"""
        return get_domain(g.account, domain, service_config())

    @blp.response(204)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def delete(self, domain: str) -> None:
        """Delete a sending domain and its keys"""
        delete_domain(g.account, domain)


@blp.route("/domains/<domain>/verify")
class VerifyDomain(MethodView):
    @blp.response(200, DomainSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def post(self, domain: str) -> DomainState:
        """Check every record in DNS now

        The domain is `verified` once a DKIM record matches; a pending key that matches starts
        signing.
        """
        return verify_domain(g.account, domain, service_config())


@blp.route("/domains/<domain>/dkim/rotate")
class RotateKey(MethodView):
    @blp.response(200, DomainSchema)
    @blp.alt_response(409, schema=ErrorSchema, description="A new key is already pending.")
    def post(self, domain: str) -> DomainState:
        """Add a new DKIM key

        It is `pending`: signing moves to it once its record verifies; the old key signs until
        then, and is `retired` after.
        """
        return rotate_key(g.account, domain, service_config())


@blp.route("/domains/<domain>/dkim/<selector>")
class KeyBySelector(MethodView):
    @blp.response(204)
    @blp.alt_response(409, schema=ErrorSchema, description="It is the only active key.")
    def delete(self, domain: str, selector: str) -> None:
        """Delete a DKIM key"""
        delete_key(g.account, domain, selector)


class RuleSchema(ma.Schema):
    id = fields.String(
        metadata={
            "description": "spf, dkim, dmarc, ptr, tls, unsubscribe or complaint_rate.",
        }
    )
    title = fields.String()
    status = fields.String(metadata={"description": "ok, fail or unknown (Layang cannot tell)."})
    found = fields.String(metadata={"description": "What the check found."})
    fix = fields.String(metadata={"description": "What to do about it; empty when nothing."})


class ComplianceSchema(ma.Schema):
    domain = fields.String()
    rules = fields.List(fields.Nested(RuleSchema))


@blp.route("/domains/<domain>/compliance")
class DomainCompliance(MethodView):
    @blp.response(200, ComplianceSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def get(self, domain: str) -> Compliance:
        """Check the large providers' rules for bulk senders

        SPF and DKIM aligned with From, DMARC published, forward-confirmed PTR for every source
        address, TLS to the provider's MX, one-click unsubscribe on broadcast mail, complaint
        rate under 0.3 %: each rule checked now, with what was found and the fix.
        """
        return check_compliance(g.account, domain, service_config())


class UtcDay(fields.Field):
    """An ISO 8601 date (``2026-11-26``) or date-time (``2026-11-26T00:00:00Z``, any offset;
    none means UTC), read as the UTC day it falls on: the figures are kept by whole UTC days
    (RFC 7489 reports cover days)."""

    default_error_messages = {  # noqa: RUF012 - marshmallow's own class attribute
        "invalid": "Not a valid ISO 8601 date or date-time."
    }

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> date:
        if not isinstance(value, str) or not value.isascii():
            raise self.make_error("invalid")
        try:
            if "T" not in value.upper() and " " not in value:
                return date.fromisoformat(value)
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise self.make_error("invalid") from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC).date()


class DmarcQuerySchema(CompatSchema):
    from_ = UtcDay(
        data_key="from",
        metadata={
            "description": "First day (ISO 8601 date or date-time, its UTC day); default 30 "
            "days before `to`."
        },
    )
    to = UtcDay(
        metadata={
            "description": "Last day (ISO 8601 date or date-time, its UTC day); default today."
        }
    )


class DmarcSourceSchema(ma.Schema):
    ip = fields.String()
    count = fields.Integer(metadata={"description": "Messages the reports counted."})
    spf = fields.String(metadata={"description": "SPF result: pass, fail, softfail, none…"})
    dkim = fields.String(metadata={"description": "DKIM result: pass, fail, none…"})
    spf_aligned = fields.Boolean(data_key="spfAligned")
    dkim_aligned = fields.Boolean(data_key="dkimAligned")
    disposition = fields.String(metadata={"description": "none, quarantine or reject."})
    known = fields.Boolean(
        metadata={
            "description": "Layang's own source address or relay host, or aligned DKIM with "
            "Layang's keys; false: an unknown source sending as the domain."
        }
    )


class DmarcSchema(ma.Schema):
    domain = fields.String()
    start = fields.Date(data_key="from")
    end = fields.Date(data_key="to")
    reports = fields.Integer(metadata={"description": "Reports received for the range."})
    total = fields.Integer(metadata={"description": "Messages they count."})
    sources = fields.List(fields.Nested(DmarcSourceSchema))


@blp.route("/domains/<domain>/dmarc")
class DomainDmarc(MethodView):
    @blp.arguments(DmarcQuerySchema, location="query")
    @blp.response(200, DmarcSchema)
    @blp.alt_response(404, schema=ErrorSchema, description="No such domain in this account.")
    def get(self, query: dict[str, Any], domain: str) -> DmarcFigures:
        """DMARC aggregate reports received for a domain, per source

        Read by `layang inbound` from `dmarc@<returnPathDomain>` (the address the suggested
        DMARC record names); largest sources first.
        """
        return dmarc_figures(
            g.account, domain, query.get("from_"), query.get("to"), service_config()
        )
