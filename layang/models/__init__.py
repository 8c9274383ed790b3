"""Tables. Timestamps are integer milliseconds since the epoch (UTC), the same on every backend.

One module per concern (``accounts``, ``mail``, ``domains``, ``webhooks``, ``destinations``,
``counters``, ``dmarc``, ``team``, ``inbound``), each table beside the constants its columns
take; every model and constant is handed on from here, so ``from layang.models import Recipient``
is how the code reaches them. ``BaseModel`` (``base``) binds them all to the database proxy of
``layang.db``.
"""

from __future__ import annotations

import peewee

import templates_store
from layang.db import database, write_transaction
from layang.models.accounts import (
    FULL,
    LIVE,
    READ,
    SANDBOX,
    SCOPES,
    SEND,
    UNVERIFIED,
    VERIFIED,
    Account,
    ApiKey,
    AuthorizedRecipient,
    IdempotencyAnswer,
    IdempotencyKey,
    RateWindow,
)
from layang.models.base import (
    BaseModel,
)
from layang.models.counters import (
    ActivityCount,
    ActivityTagCount,
    BreakerCount,
    BreakerState,
)
from layang.models.destinations import (
    OK,
    SITE_STATES,
    SUSPENDED,
    THROTTLED,
    MtaStsPolicy,
    MxDomain,
    SiteSlot,
    SiteState,
    TlsReport,
    TlsSessionResult,
)
from layang.models.dmarc import (
    DmarcRecord,
    DmarcReport,
)
from layang.models.domains import (
    ACTIVE,
    PENDING,
    RETIRED,
    DkimKey,
    SendingDomain,
    TrackingDomain,
)
from layang.models.inbound import (
    INBOUND_ACTIONS,
    INBOUND_HOLD,
    INBOUND_REJECT,
    INBOUND_WEBHOOK,
    InboundDomain,
    InboundEmail,
    InboundMessage,
    InboundRoute,
)
from layang.models.mail import (
    AUTO_REPLY,
    BOUNCE,
    BROADCAST,
    CANCELLED,
    CLICK,
    COMPLAINED,
    COMPLAINT,
    DELAY,
    DELIVERY,
    DELIVERY_STATES,
    EVENT_KINDS,
    FINAL_STATES,
    HARD_BOUNCE,
    INJECTION,
    MANUAL,
    OPEN,
    SCHEDULED,
    STREAM_PRIORITY,
    STREAMS,
    SUPPRESSED,
    SUPPRESSION_REASONS,
    TRANSACTIONAL,
    UNSUBSCRIBE,
    UNSUBSCRIBED,
    WARNING,
    Event,
    PayloadChunk,
    Recipient,
    Suppression,
    Transmission,
    TransmissionTag,
)
from layang.models.team import (
    ADMIN,
    DEVELOPER,
    OWNER,
    ROLES,
    VIEWER,
    AuditEntry,
    ConsoleSession,
    ConsoleUser,
    Membership,
    Passkey,
    SignInWindow,
    UserSession,
    UserToken,
)
from layang.models.webhooks import (
    WEBHOOK_DELIVERED,
    WEBHOOK_EVENT_TYPES,
    WEBHOOK_FAILED,
    WEBHOOK_PENDING,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)

# The template store's tables live in the same database as everything else, written like it.
templates_store.bind(database, write_transaction=write_transaction)

# The tables themselves are made by layang.migrations, whose result must match these models.
MODELS: list[type[peewee.Model]] = [
    Account,
    ApiKey,
    Transmission,
    TransmissionTag,
    Recipient,
    Event,
    PayloadChunk,
    AuthorizedRecipient,
    SendingDomain,
    DkimKey,
    IdempotencyKey,
    IdempotencyAnswer,
    RateWindow,
    Suppression,
    InboundMessage,
    *templates_store.MODELS,
    WebhookEndpoint,
    WebhookEvent,
    WebhookDelivery,
    WebhookAttempt,
    MxDomain,
    SiteState,
    SiteSlot,
    ConsoleSession,
    MtaStsPolicy,
    TlsSessionResult,
    TlsReport,
    BreakerCount,
    BreakerState,
    DmarcReport,
    DmarcRecord,
    ActivityCount,
    TrackingDomain,
    ActivityTagCount,
    AuditEntry,
    ConsoleUser,
    Membership,
    UserToken,
    UserSession,
    SignInWindow,
    Passkey,
    InboundDomain,
    InboundRoute,
    InboundEmail,
]
