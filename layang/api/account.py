"""``/v1/layang/account``: the calling key's account and how long it keeps its data (docs/api.md,
"The account and its retention")."""

from __future__ import annotations

from typing import Any

import marshmallow as ma
from flask import current_app, g, request
from flask.views import MethodView
from marshmallow import fields, validate

from layang.api import Blueprint
from layang.config import MAX_RETENTION_DAYS
from layang.lifecycle.retention import AccountRetention, account_retention, change_retention
from layang.team import audit

blp = Blueprint("account", __name__, description="The account and how long it keeps its data.")

RETENTION_DAYS = (
    "Days activity records, their events (opens and clicks included) and webhook history are "
    "kept; mail still queued is kept whatever its age."
)
CONTENT_DAYS = (
    "Days a message's content (bodies, attachments) is kept after its last recipient reached a "
    "final state; then its records say `content: expired`."
)
STORE_CONTENT = "false: content is removed as soon as every recipient is final (0 days)."


class AccountSchema(ma.Schema):
    """Dumps a :class:`layang.lifecycle.retention.AccountRetention`."""

    name = fields.String()
    mode = fields.String(metadata={"description": "sandbox or live."})
    retention_days = fields.Integer(
        data_key="retentionDays", metadata={"description": RETENTION_DAYS}
    )
    content_days = fields.Integer(data_key="contentDays", metadata={"description": CONTENT_DAYS})
    store_content = fields.Boolean(data_key="storeContent", metadata={"description": STORE_CONTENT})


class AccountPatchSchema(ma.Schema):
    retentionDays = fields.Integer(
        allow_none=True,
        strict=True,
        validate=validate.Range(1, MAX_RETENTION_DAYS),
        metadata={"description": f"{RETENTION_DAYS} null: the service's setting."},
    )
    contentDays = fields.Integer(
        allow_none=True,
        strict=True,
        validate=validate.Range(0, MAX_RETENTION_DAYS),
        metadata={"description": f"{CONTENT_DAYS} null: the service's setting."},
    )
    storeContent = fields.Boolean(
        truthy={True}, falsy={False}, metadata={"description": STORE_CONTENT}
    )


@blp.route("/account")
class AccountView(MethodView):
    @blp.response(200, AccountSchema)
    def get(self) -> AccountRetention:
        """Show the account and its retention"""
        return account_retention(g.account, current_app.config["LAYANG"])

    @blp.arguments(AccountPatchSchema())
    @blp.response(200, AccountSchema)
    def patch(self, data: dict[str, Any]) -> AccountRetention:
        """Change the account's retention

        Members left out stay as they are; null returns a number to the service's setting.
        Recorded in the audit log.
        """
        names = {
            "retentionDays": "retention_days",
            "contentDays": "content_days",
            "storeContent": "store_content",
        }
        return change_retention(
            g.account,
            current_app.config["LAYANG"],
            **{names[name]: value for name, value in data.items()},
            actor=audit.key_actor(g.credential.key_id),
            source=request.remote_addr or "",
        )
