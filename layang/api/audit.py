"""``/v1/layang/audit``: the account's audit log (CONTRACT section 21), and the hook that
records every change an API key makes through the API into it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import flask
import marshmallow as ma
from flask import g, request
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.api.fields import ISO_8601, CursorQuerySchema, Timestamp, page_schema
from layang.team import audit

blp = Blueprint("audit", __name__, description="Who changed what, when, and from where.")


class AuditEntrySchema(ma.Schema):
    """Dumps a :class:`layang.models.AuditEntry`."""

    id = fields.String()
    at = Timestamp(metadata=ISO_8601)
    actor = fields.String(
        metadata={
            "description": '"user:<email>" for a person, "key:<id>" for an API key, '
            '"cli" or "system".'
        }
    )
    action = fields.String(metadata={"description": "A dotted verb: template.updated, sign_in."})
    target = fields.String(
        metadata={"description": "What changed: an id, a domain, an address's SHA-256."}
    )
    source = fields.String(metadata={"description": "The client's IP address, or cli."})
    detail = fields.Function(lambda entry: audit.detail_of(entry))


AuditListSchema = page_schema(AuditEntrySchema, "AuditListSchema")


class AuditQuerySchema(CursorQuerySchema):
    since = fields.AwareDateTime(default_timezone=UTC, metadata={"description": "ISO 8601."})
    actor = fields.String(validate=validate.Length(max=320))
    action = fields.String(
        validate=validate.Length(max=64),
        metadata={"description": "One action, or all under a prefix ending in '.' (template.)."},
    )


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else int(moment.timestamp() * 1000)


@blp.route("/audit")
class AuditLog(MethodView):
    @blp.arguments(AuditQuerySchema(), location="query")
    @blp.response(200, AuditListSchema)
    def get(self, query: dict[str, Any]) -> audit.AuditPage:
        """List the audit log, newest first

        Follow `nextCursor` (pass it as `cursor`) for the next page; it is null on the last.
        Entries are kept 400 days.
        """
        return audit.browse(
            g.account,
            since=_ms(query.get("since")),
            actor=query.get("actor"),
            action=query.get("action"),
            cursor=query.get("cursor"),
            limit=query["limit"],
        )


# The API's resources by blueprint, as audit actions name them; sending mail is not a change
# of the account (Activity records it), and the team's own views record what they do.
NOUNS = {
    "templates": "template",
    "domains": "domain",
    "webhooks": "webhook",
    "suppressions": "suppression",
    "authorized_recipients": "authorized_recipient",
}
VERBS = {"POST": "created", "PUT": "updated", "PATCH": "updated", "DELETE": "deleted"}
# Posts that change nothing.
NOT_CHANGES = frozenset({"preview", "compliance"})
# Their target is a person's address: recorded as its SHA-256, never the address.
ADDRESSED = frozenset({"suppressions", "authorized_recipients"})


def record_change(response: flask.Response) -> flask.Response:
    """After every successful write by an API key: one audit entry naming what changed."""
    credential = g.get("credential")
    rule = request.url_rule
    if credential is None or rule is None or response.status_code >= 400:
        return response
    if request.method not in VERBS or request.blueprint not in NOUNS:
        return response
    tail = rule.rule.rstrip("/").rsplit("/", 1)[-1]
    verb = VERBS[request.method]
    if rule.arguments and not tail.startswith("<"):
        if tail in NOT_CHANGES:
            return response
        verb = tail.replace("-", "_")
    target = next(iter((request.view_args or {}).values()), "")
    if not target and response.is_json:
        body = response.get_json(silent=True) or {}
        target = str(body.get("id") or body.get("domain") or body.get("email") or "")
    if request.blueprint in ADDRESSED and target and "@" in target:
        target = audit.address_hash(target)
    audit.record(
        credential.account.id,
        audit.key_actor(credential.key_id),
        f"{NOUNS[request.blueprint]}.{verb}",
        str(target),
        source=(request.remote_addr or "unknown"),
    )
    return response
