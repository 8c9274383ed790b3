"""Mail received: reports the inbound server could not read, and inbound routing (domains,
routes, the messages received for them)."""

from __future__ import annotations

import peewee

from layang.clock import now_ms
from layang.ids import new_id
from layang.models.accounts import VERIFIED, Account
from layang.models.base import BaseModel
from layang.models.domains import PENDING
from layang.models.webhooks import WebhookEndpoint


class InboundMessage(BaseModel):
    """Mail the inbound server accepted but could not read as a bounce or complaint report,
    kept for inspection (``layang inbound list``); ``raw`` is cut at ``RAW_KEPT_BYTES``."""

    received_at = peewee.BigIntegerField(index=True)
    mail_from = peewee.TextField()
    rcpt_to = peewee.TextField()
    size = peewee.IntegerField()
    raw = peewee.BlobField()
    reason = peewee.TextField()


# Inbound routing (docs/api.md, "Inbound routing").
INBOUND_WEBHOOK = "webhook"
INBOUND_HOLD = "hold"
INBOUND_REJECT = "reject"
INBOUND_ACTIONS = (INBOUND_WEBHOOK, INBOUND_HOLD, INBOUND_REJECT)


class InboundDomain(BaseModel):
    """A domain whose mail an account receives here; ``verified`` once its MX names this
    service's inbound host. Like sending domains, one verified row per ``domain``."""

    account = peewee.ForeignKeyField(Account, backref="inbound_domains", on_delete="CASCADE")
    domain = peewee.CharField(max_length=253)
    status = peewee.CharField(max_length=16, default=PENDING)
    records = peewee.TextField(default="[]")
    created_at = peewee.BigIntegerField(default=now_ms)
    checked_at = peewee.BigIntegerField(null=True)
    verified_at = peewee.BigIntegerField(null=True)

    class Meta:
        indexes = ((("account", "domain"), True),)


InboundDomain.add_index(
    InboundDomain.index(
        InboundDomain.domain,
        unique=True,
        where=InboundDomain.status == VERIFIED,
        name="inbound_domain_verified_domain",
    )
)


class InboundRoute(BaseModel):
    """Where mail to ``local_part@domain`` goes (``*`` for any local part of the domain).
    A ``webhook`` route posts through ``endpoint`` (a ``kind = 'inbound'`` endpoint)."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE")
    domain = peewee.ForeignKeyField(InboundDomain, backref="routes", on_delete="CASCADE")
    local_part = peewee.CharField(max_length=64)
    action = peewee.CharField(max_length=16)
    endpoint = peewee.ForeignKeyField(WebhookEndpoint, null=True, on_delete="SET NULL")
    spam_threshold = peewee.FloatField(null=True)
    created_at = peewee.BigIntegerField(default=now_ms)

    class Meta:
        indexes = ((("domain", "local_part"), True),)


class InboundEmail(BaseModel):
    """One message received for one route, as received (``raw``) and as posted (``payload``,
    the webhook's body); ``delivery_id`` is its latest webhook delivery, if any."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE")
    route = peewee.ForeignKeyField(InboundRoute, null=True, on_delete="SET NULL")
    route_match = peewee.CharField(max_length=320)
    action = peewee.CharField(max_length=16)
    received_at = peewee.BigIntegerField(index=True)
    mail_from = peewee.CharField(max_length=512)
    rcpt_to = peewee.TextField()
    from_header = peewee.TextField()
    subject = peewee.TextField()
    size = peewee.IntegerField()
    spam_score = peewee.FloatField(null=True)
    # Why a message of a webhook route was held instead (its spam score passed the threshold).
    note = peewee.TextField(null=True)
    payload = peewee.TextField()
    raw = peewee.BlobField()
    delivery_id = peewee.CharField(max_length=26, null=True)
    # Every delivery made for it, oldest first (the first, then one per retry from the API).
    deliveries = peewee.TextField(default="[]")

    class Meta:
        indexes = ((("account", "id"), False),)
