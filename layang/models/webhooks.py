"""Webhooks: endpoints, the event outbox, deliveries (one request each) and their attempts."""

from __future__ import annotations

import peewee

from layang.clock import now_ms
from layang.ids import new_id
from layang.models.accounts import Account
from layang.models.base import BaseModel
from layang.models.mail import (
    AUTO_REPLY,
    BOUNCE,
    CLICK,
    COMPLAINT,
    DELAY,
    DELIVERY,
    INJECTION,
    OPEN,
    SUPPRESSED,
    UNSUBSCRIBE,
    WARNING,
)

# Webhooks (docs/api.md, "Webhooks"). Event types an endpoint may subscribe to, besides "*".
WEBHOOK_EVENT_TYPES = (
    INJECTION,
    DELIVERY,
    DELAY,
    BOUNCE,
    SUPPRESSED,
    OPEN,
    CLICK,
    COMPLAINT,
    UNSUBSCRIBE,
    AUTO_REPLY,
    WARNING,
)
WEBHOOK_PENDING = "pending"
WEBHOOK_DELIVERED = "delivered"
WEBHOOK_FAILED = "failed"


class WebhookEndpoint(BaseModel):
    """Where an account's events are pushed. ``events`` is ``*`` or the subscribed types
    between commas (``,Delivery,Bounce,``), so that SQL can match a type with one LIKE.
    ``secret`` (and, for a day after a rotation, ``previous_secret``) is sealed like a DKIM key.
    It is enabled while ``disabled_at`` is null; ``failing_since`` is the first failed attempt
    since the last success."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    account = peewee.ForeignKeyField(Account, backref="webhook_endpoints", on_delete="CASCADE")
    url = peewee.TextField()
    description = peewee.TextField(default="")
    events = peewee.TextField()
    secret = peewee.BlobField()
    previous_secret = peewee.BlobField(null=True)
    previous_secret_expires_at = peewee.BigIntegerField(null=True)
    created_at = peewee.BigIntegerField(default=now_ms)
    updated_at = peewee.BigIntegerField(default=now_ms)
    disabled_at = peewee.BigIntegerField(null=True)
    disabled_reason = peewee.TextField(null=True)
    failing_since = peewee.BigIntegerField(null=True)
    # "events" for the account's webhooks; "inbound" for the endpoint an inbound route posts to.
    kind = peewee.CharField(
        max_length=16, default="events", constraints=[peewee.SQL("DEFAULT 'events'")]
    )


class WebhookEvent(BaseModel):
    """The webhook outbox: one event for one endpoint, written in the transaction of the
    activity event it reports. ``event_id`` is the event's public id, the same for every
    endpoint; ``delivery`` is set once the event is put into a delivery (a request)."""

    id = peewee.AutoField()
    event_id = peewee.CharField(max_length=32)
    endpoint = peewee.ForeignKeyField(WebhookEndpoint, on_delete="CASCADE", index=False)
    recipient_id = peewee.CharField(max_length=26, null=True)
    status = peewee.CharField(max_length=16)
    created_at = peewee.BigIntegerField()
    detail = peewee.TextField(default="{}")
    delivery_id = peewee.CharField(max_length=26, null=True)

    class Meta:
        indexes = (
            (("delivery_id", "id"), False),
            (("endpoint", "recipient_id"), False),
        )


class WebhookDelivery(BaseModel):
    """One request to an endpoint: fixed events and body, so every retry sends the same bytes
    under the same ``webhook-id``. Due while ``next_attempt_at`` is set and has passed; held
    by a dispatcher while ``lease_expires_at`` lies in the future, as outbox mail is."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    endpoint = peewee.ForeignKeyField(WebhookEndpoint, on_delete="CASCADE")
    event_ids = peewee.TextField()
    body = peewee.TextField()
    status = peewee.CharField(max_length=16, default=WEBHOOK_PENDING)
    attempts = peewee.IntegerField(default=0)
    created_at = peewee.BigIntegerField(default=now_ms)
    next_attempt_at = peewee.BigIntegerField(null=True, index=True)
    lease_owner = peewee.CharField(max_length=64, null=True)
    lease_expires_at = peewee.BigIntegerField(null=True)


# A route's deliveries go one at a time: a claim asks whether an older one is pending.
WebhookDelivery.add_index(
    WebhookDelivery.index(
        WebhookDelivery.endpoint,
        WebhookDelivery.id,
        where=WebhookDelivery.status == WEBHOOK_PENDING,
        name="webhook_delivery_pending_endpoint_id",
    )
)


class WebhookAttempt(BaseModel):
    """One POST of a delivery and its outcome: ``pending`` (failed, retried at
    ``next_attempt_at``), ``delivered`` or ``failed`` (the last retry failed)."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    delivery = peewee.ForeignKeyField(WebhookDelivery, on_delete="CASCADE")
    endpoint = peewee.ForeignKeyField(WebhookEndpoint, on_delete="CASCADE", index=False)
    attempted_at = peewee.BigIntegerField()
    status = peewee.CharField(max_length=16)
    response_status = peewee.IntegerField(null=True)
    error = peewee.TextField(null=True)
    next_attempt_at = peewee.BigIntegerField(null=True)

    class Meta:
        indexes = ((("endpoint", "id"), False),)
