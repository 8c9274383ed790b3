"""Tables. Timestamps are integer milliseconds since the epoch (UTC), the same on every backend."""

from __future__ import annotations

import peewee

import templates_store
from layang.clock import now_ms
from layang.db import database, new_id, write_transaction

SANDBOX = "sandbox"
LIVE = "live"

# What an API key may do (docs/api.md, "Idempotency, rate limits, key scopes"): everything, only
# submit mail, or only read.
FULL = "full"
SEND = "send"
READ = "read"
SCOPES = (FULL, SEND, READ)

# Delivery states of one email to one recipient, and the engagement events added later.
INJECTION = "Injection"
DELAY = "Delay"
DELIVERY = "Delivery"
BOUNCE = "Bounce"
SUPPRESSED = "Suppressed"
SCHEDULED = "Scheduled"
"""Waiting for its ``scheduledAt``: not in the queue yet."""
CANCELLED = "Cancelled"
"""A scheduled email cancelled before its time: never sent."""
OPEN = "Open"
CLICK = "Click"
COMPLAINT = "Complaint"
UNSUBSCRIBE = "Unsubscribe"
AUTO_REPLY = "AutoReply"
"""An automatic reply (RFC 3834) to the email: no delivery state, no suppression."""
DELIVERY_STATES = (INJECTION, DELAY, DELIVERY, BOUNCE, SUPPRESSED, SCHEDULED, CANCELLED)
WARNING = "Warning"
"""Not an email's event: the circuit breaker's, about an account or domain (docs/api.md, "Streams
and the circuit breaker")."""

# Streams (docs/api.md, "Streams and the circuit breaker"): transactional mail is claimed before
# broadcast mail (``priority``).
TRANSACTIONAL = "transactional"
BROADCAST = "broadcast"
STREAMS = (TRANSACTIONAL, BROADCAST)
STREAM_PRIORITY = {TRANSACTIONAL: 0, BROADCAST: 1}
FINAL_STATES = (BOUNCE, SUPPRESSED, CANCELLED)
"""A record in one of these states keeps it, whatever outcome is recorded after (a bounce
report can arrive before the worker records the delivery it follows)."""
EVENT_KINDS = (*DELIVERY_STATES, OPEN, CLICK, COMPLAINT, UNSUBSCRIBE, AUTO_REPLY)


class BaseModel(peewee.Model):
    class Meta:
        database = database
        legacy_table_names = False


class Account(BaseModel):
    name = peewee.CharField(max_length=64, unique=True)
    mode = peewee.CharField(max_length=16, default=SANDBOX)
    created_at = peewee.BigIntegerField(default=now_ms)
    # Retention (docs/deploy.md, "What is kept, and for how long"): null days are the service's
    # settings; without ``store_content`` a message's content goes once every recipient is final.
    # No Python default: the database's fills it, so an Account written by older code still works
    # (None in an unsaved instance means the default, true).
    retention_days = peewee.IntegerField(null=True)
    content_days = peewee.IntegerField(null=True)
    store_content = peewee.BooleanField(constraints=[peewee.SQL("DEFAULT TRUE")])
    two_factor_required_at = peewee.BigIntegerField(null=True)

    @property
    def is_sandbox(self) -> bool:
        return self.mode == SANDBOX


class ApiKey(BaseModel):
    """An API key. Only the SHA-256 of the secret is stored: keys carry 256 random bits, so a
    fast hash is safe and lets a request find its key with one indexed lookup."""

    id = peewee.CharField(primary_key=True, max_length=32)
    account = peewee.ForeignKeyField(Account, backref="keys", on_delete="CASCADE")
    label = peewee.CharField(max_length=200, default="")
    prefix = peewee.CharField(max_length=16)
    secret_hash = peewee.CharField(max_length=64, unique=True)
    created_at = peewee.BigIntegerField(default=now_ms)
    revoked_at = peewee.BigIntegerField(null=True)
    scope = peewee.CharField(max_length=8, default=FULL, constraints=[peewee.SQL("DEFAULT 'full'")])


class Transmission(BaseModel):
    """One accepted message, as submitted. ``payload`` holds the validated request (API) from
    which the MIME message is built once, or is null when the request was large and is stored
    in ``PayloadChunk`` rows instead; ``raw`` holds the finished MIME bytes (SMTP submissions
    arrive finished, API ones are filled in by the first delivery attempt)."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    account = peewee.ForeignKeyField(Account, backref="transmissions", on_delete="CASCADE")
    created_at = peewee.BigIntegerField(default=now_ms)
    source = peewee.CharField(max_length=8, default="api")
    mail_from = peewee.CharField(max_length=320)
    from_header = peewee.TextField(default="")
    subject = peewee.TextField(default="")
    message_id = peewee.CharField(max_length=400)
    metadata = peewee.TextField(default="{}")
    payload = peewee.TextField(null=True)
    raw = peewee.BlobField(null=True)
    stream = peewee.CharField(
        max_length=16, default=TRANSACTIONAL, constraints=[peewee.SQL("DEFAULT 'transactional'")]
    )
    from_domain = peewee.CharField(
        max_length=253, default="", constraints=[peewee.SQL("DEFAULT ''")]
    )
    # "requiretls" (RFC 8689 REQUIRETLS), "optional" (a TLS-Required: No header) or null.
    tls_requirement = peewee.CharField(max_length=16, null=True)
    # When retention removed ``payload``, ``raw`` and the payload's chunks (null: still kept).
    content_expired_at = peewee.BigIntegerField(null=True)
    # 1 when some recipient has content of its own (``Recipient.content``). No Python default:
    # the database's applies to rows written without it.
    personalized = peewee.IntegerField(constraints=[peewee.SQL("DEFAULT 0")])
    # The send's tags as a JSON list, null for none (each also a ``TransmissionTag`` row).
    tags = peewee.TextField(null=True)
    # When a scheduled send is (or was) due, epoch ms; null for one sent at once.
    scheduled_at = peewee.BigIntegerField(null=True)


Transmission.add_index(
    Transmission.index(
        Transmission.account,
        Transmission.id,
        where=Transmission.content_expired_at.is_null(),
        name="transmission_content_kept",
    )
)


class TransmissionTag(BaseModel):
    """One tag of a transmission, as the Activity filter and the overview's triggers find it
    (CONTRACT section 23)."""

    transmission = peewee.ForeignKeyField(Transmission, on_delete="CASCADE", index=True)
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    tag = peewee.CharField(max_length=64)

    class Meta:
        primary_key = peewee.CompositeKey("transmission", "tag")
        indexes = ((("account", "tag", "transmission"), False),)


class Recipient(BaseModel):
    """One email to one recipient: both its place in the outbox and its activity record.

    It is due for an attempt while ``next_attempt_at`` is set; a worker holds it while
    ``lease_expires_at`` lies in the future.
    """

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    transmission = peewee.ForeignKeyField(
        Transmission, backref="recipients", on_delete="CASCADE", index=True
    )
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    address = peewee.CharField(max_length=320)
    recipient_type = peewee.CharField(max_length=3)
    status = peewee.CharField(max_length=16, default=INJECTION)
    created_at = peewee.BigIntegerField(default=now_ms)
    updated_at = peewee.BigIntegerField(default=now_ms)
    attempts = peewee.IntegerField(default=0)
    next_attempt_at = peewee.BigIntegerField(null=True, index=True)
    lease_owner = peewee.CharField(max_length=64, null=True)
    lease_expires_at = peewee.BigIntegerField(null=True)
    # The address's domain (lower-cased), so waiting mail can be grouped by destination, and
    # what a waiting recipient waits on (a throttled or suspended site), if anything.
    domain = peewee.TextField(null=True)
    waiting_on = peewee.TextField(null=True)
    priority = peewee.IntegerField(default=0, constraints=[peewee.SQL("DEFAULT 0")])
    # A ``to`` recipient's own data (CONTRACT section 23): its copy's subject and bodies as
    # JSON (``layang.mail.outbox.PersonalContent``), its metadata merged over the message's.
    content = peewee.TextField(null=True)
    metadata = peewee.TextField(null=True)
    # While ``Scheduled``: when it is due (epoch ms); cleared when released or cancelled.
    scheduled_at = peewee.BigIntegerField(null=True, index=True)

    class Meta:
        indexes = (
            (("account", "id"), False),
            (("account", "status", "id"), False),
            (("domain", "next_attempt_at"), False),
            (("priority", "next_attempt_at"), False),
            (("waiting_on",), False),
        )


class Event(BaseModel):
    recipient = peewee.ForeignKeyField(Recipient, backref="events", on_delete="CASCADE")
    status = peewee.CharField(max_length=16)
    created_at = peewee.BigIntegerField(default=now_ms)
    detail = peewee.TextField(default="{}")


class PayloadChunk(BaseModel):
    """A piece of a large message's stored payload (``Transmission.payload``): the pieces'
    ``text`` in ``seq`` order is the payload. Stored in pieces so that no process ever holds
    the payload's text whole while storing it (see ``layang.mail.outbox``)."""

    transmission = peewee.ForeignKeyField(Transmission, on_delete="CASCADE", index=False)
    seq = peewee.IntegerField()
    text = peewee.TextField()

    class Meta:
        primary_key = peewee.CompositeKey("transmission", "seq")


# The tables themselves are made by layang.migrations, whose result must match these models.
MODELS: list[type[peewee.Model]] = [
    Account,
    ApiKey,
    Transmission,
    TransmissionTag,
    Recipient,
    Event,
    PayloadChunk,
]


UNVERIFIED = "unverified"
VERIFIED = "verified"


class AuthorizedRecipient(BaseModel):
    """An address a sandbox account may send to once its owner has given consent.

    Only the SHA-256 of the consent token is kept; using it clears it (single use).
    """

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    account = peewee.ForeignKeyField(Account, backref="authorized_recipients", on_delete="CASCADE")
    email = peewee.CharField(max_length=320)
    email_key = peewee.CharField(max_length=320)
    name = peewee.CharField(max_length=256, null=True)
    status = peewee.CharField(max_length=16, default=UNVERIFIED)
    created_at = peewee.BigIntegerField(default=now_ms)
    verified_at = peewee.BigIntegerField(null=True)
    token_hash = peewee.CharField(max_length=64, null=True, unique=True)
    token_expires_at = peewee.BigIntegerField(null=True)

    class Meta:
        indexes = ((("account", "email_key"), True),)


MODELS.append(AuthorizedRecipient)


PENDING = "pending"
ACTIVE = "active"
RETIRED = "retired"


class SendingDomain(BaseModel):
    """A domain an account sends from. Accounts may claim a domain at once while it is
    pending; once verified it belongs to that account alone (one verified row per ``domain``).
    ``status`` turns ``verified`` once one of its DKIM records is found in DNS. ``records``
    keeps the last DNS check, as JSON, so a listing needs no look-ups."""

    account = peewee.ForeignKeyField(Account, backref="sending_domains", on_delete="CASCADE")
    domain = peewee.CharField(max_length=253)
    return_path_domain = peewee.CharField(max_length=253)
    status = peewee.CharField(max_length=16, default=PENDING)
    records = peewee.TextField(default="[]")
    created_at = peewee.BigIntegerField(default=now_ms)
    checked_at = peewee.BigIntegerField(null=True)
    verified_at = peewee.BigIntegerField(null=True)

    class Meta:
        indexes = ((("account", "domain"), True),)


SendingDomain.add_index(
    SendingDomain.index(
        SendingDomain.domain,
        unique=True,
        where=SendingDomain.status == VERIFIED,
        name="sending_domain_verified_domain",
    )
)


class DkimKey(BaseModel):
    """One DKIM key pair of a sending domain. Only the key that is ``active`` signs; a
    ``pending`` one takes over once its record is found, and the one it replaces is
    ``retired`` (kept, with its record, until deleted). ``private_key`` is encrypted."""

    sending_domain = peewee.ForeignKeyField(SendingDomain, backref="keys", on_delete="CASCADE")
    selector = peewee.CharField(max_length=63)
    algorithm = peewee.CharField(max_length=16)
    bits = peewee.IntegerField()
    status = peewee.CharField(max_length=16, default=PENDING)
    public_key = peewee.TextField()
    private_key = peewee.BlobField()
    created_at = peewee.BigIntegerField(default=now_ms)
    activated_at = peewee.BigIntegerField(null=True)

    class Meta:
        indexes = ((("sending_domain", "selector"), True),)


MODELS.extend([SendingDomain, DkimKey])


class IdempotencyKey(BaseModel):
    """A request's ``Idempotency-Key``, claimed by the process handling it. ``token`` names that
    claim, so that only its holder releases it; ``claimed_at`` lets a claim whose holder died
    be taken over."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    key = peewee.CharField(max_length=255)
    fingerprint = peewee.CharField(max_length=64)
    token = peewee.CharField(max_length=32)
    claimed_at = peewee.BigIntegerField()
    expires_at = peewee.BigIntegerField(index=True)

    class Meta:
        indexes = ((("account", "key"), True),)


class IdempotencyAnswer(BaseModel):
    """The answer given to the first request with a key, committed with the work it answers
    for; unique per key, so two holders of one key can never both commit their work."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    key = peewee.CharField(max_length=255)
    fingerprint = peewee.CharField(max_length=64)
    status = peewee.IntegerField()
    body = peewee.TextField()
    expires_at = peewee.BigIntegerField(index=True)

    class Meta:
        indexes = ((("account", "key"), True),)


class RateWindow(BaseModel):
    """How many messages an account submitted in one fixed window of the rate limit."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    starts_at = peewee.BigIntegerField()
    ends_at = peewee.BigIntegerField(index=True)
    count = peewee.IntegerField()

    class Meta:
        indexes = ((("account", "starts_at"), True),)


MODELS.extend([IdempotencyKey, IdempotencyAnswer, RateWindow])


# Why an address is on an account's suppression list (docs/api.md, "Suppression list").
HARD_BOUNCE = "hard_bounce"
COMPLAINED = "complaint"
UNSUBSCRIBED = "unsubscribe"
MANUAL = "manual"
SUPPRESSION_REASONS = (HARD_BOUNCE, COMPLAINED, UNSUBSCRIBED, MANUAL)


class Suppression(BaseModel):
    """An address an account never sends to (``unsubscribe`` entries: no non-transactional
    mail). ``email_key`` is the lower-cased address, unique per account; ``transmission_id``
    names the message whose bounce, complaint or unsubscribe added it (not a foreign key: the
    entry outlives the message). ``detail`` is the remote server's reply, ``note`` the
    account's own words."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    email = peewee.CharField(max_length=320)
    email_key = peewee.CharField(max_length=320)
    reason = peewee.CharField(max_length=16)
    transmission_id = peewee.CharField(max_length=26, null=True)
    detail = peewee.TextField(default="")
    note = peewee.TextField(default="")
    created_at = peewee.BigIntegerField(default=now_ms)

    class Meta:
        indexes = (
            (("account", "email_key"), True),
            (("account", "id"), False),
        )


MODELS.append(Suppression)


class InboundMessage(BaseModel):
    """Mail the inbound server accepted but could not read as a bounce or complaint report,
    kept for inspection (``layang inbound list``); ``raw`` is cut at ``RAW_KEPT_BYTES``."""

    received_at = peewee.BigIntegerField(index=True)
    mail_from = peewee.TextField()
    rcpt_to = peewee.TextField()
    size = peewee.IntegerField()
    raw = peewee.BlobField()
    reason = peewee.TextField()


MODELS.append(InboundMessage)


# The template store's tables live in the same database as everything else, written like it.
templates_store.bind(database, write_transaction=write_transaction)
MODELS.extend(templates_store.MODELS)


# Webhooks (docs/api.md, "Webhooks"). Event types an endpoint may subscribe to, besides "*".
SUPPRESSED = "Suppressed"
COMPLAINT = "Complaint"
UNSUBSCRIBE = "Unsubscribe"
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


MODELS.extend([WebhookEndpoint, WebhookEvent, WebhookDelivery, WebhookAttempt])


class MxDomain(BaseModel):
    """The site a recipient domain resolved to, kept until its DNS answer expires, so that
    waiting mail can be grouped by site."""

    domain = peewee.CharField(primary_key=True, max_length=253)
    site = peewee.TextField(index=True)
    expires_at = peewee.BigIntegerField()


OK = "ok"
THROTTLED = "throttled"
SUSPENDED = "suspended"
SITE_STATES = (OK, THROTTLED, SUSPENDED)


class SiteState(BaseModel):
    """What every sender process agrees about one destination site: its connection limit
    while throttled (None: the rule's), whether new sessions wait until ``until_ms`` and why,
    the current pause (``pause_ms``, doubling while the site keeps refusing), the consecutive
    connection failures, and the rate limiter's theoretical arrival time (GCRA, microseconds)."""

    site = peewee.CharField(primary_key=True, max_length=1000)
    connection_limit = peewee.IntegerField(null=True)
    rule_limit = peewee.IntegerField(null=True)
    state = peewee.CharField(max_length=16, default=OK)
    until_ms = peewee.BigIntegerField(null=True)
    reason = peewee.TextField(null=True)
    last_reply = peewee.TextField(null=True)
    pause_ms = peewee.BigIntegerField(default=0)
    signal_at = peewee.BigIntegerField(null=True)
    failures = peewee.IntegerField(default=0)
    rate_tat_us = peewee.BigIntegerField(null=True)
    updated_at = peewee.BigIntegerField(default=now_ms)
    wanted_at = peewee.BigIntegerField(null=True)  # a process was last refused a slot
    wanted_by = peewee.CharField(max_length=64, null=True)  # which one

    def shown(self, now: int) -> tuple[str, int | None]:
        """The state as people are told it, and until when: a pause that has run out shows
        as ``throttled`` (no end) while the limit is still below the rule's, else ``ok``; a
        suspension without an end lasts until resumed."""
        if self.state == SUSPENDED and (self.until_ms is None or self.until_ms > now):
            return SUSPENDED, self.until_ms
        if self.state == THROTTLED and self.until_ms is not None and self.until_ms > now:
            return THROTTLED, self.until_ms
        if self.connection_limit is not None:
            return THROTTLED, None
        return OK, None

    @classmethod
    def holding_back(cls) -> peewee.ModelSelect:
        """The rows that may show a state other than ``ok`` (a few, however many sites)."""
        return cls.select().where((cls.state != OK) | cls.connection_limit.is_null(False))

    def limit(self) -> int | None:
        """The sessions allowed now: the throttled limit, else the rule's (None: unknown)."""
        if self.connection_limit is not None:
            return self.connection_limit
        return self.rule_limit


class SiteSlot(BaseModel):
    """One open (or opening) session to a site, held by ``owner`` (a worker) until
    ``expires_at`` unless renewed: a dead worker's sessions stop counting."""

    id = peewee.CharField(primary_key=True, max_length=26, default=new_id)
    site = peewee.CharField(max_length=1000)
    owner = peewee.CharField(max_length=64, index=True)
    expires_at = peewee.BigIntegerField()

    class Meta:
        indexes = ((("site", "expires_at"), False),)


MODELS.extend([MxDomain, SiteState, SiteSlot])


class ConsoleSession(BaseModel):
    """A signed-in console session, so that signing out ends it on the server: the cookie
    holds a random token, this table its SHA-256 (``id``); no row, no session."""

    id = peewee.CharField(primary_key=True, max_length=64)
    key = peewee.ForeignKeyField(ApiKey, on_delete="CASCADE")
    created_at = peewee.BigIntegerField()
    expires_at = peewee.BigIntegerField(index=True)


MODELS.append(ConsoleSession)


class MtaStsPolicy(BaseModel):
    """A recipient domain's MTA-STS policy, cached for every worker until ``expires_at``
    (see ``layang.destinations.mta_sts``)."""

    domain = peewee.CharField(primary_key=True, max_length=255)
    policy_id = peewee.CharField(max_length=32)
    mode = peewee.CharField(max_length=16)
    mx = peewee.TextField()
    max_age = peewee.IntegerField()
    text = peewee.TextField()
    fetched_at = peewee.BigIntegerField()
    expires_at = peewee.BigIntegerField()


class TlsSessionResult(BaseModel):
    """How many sessions of one UTC ``day`` to one MX host under one policy ended one way
    (``result_type`` empty: success), for TLS-RPT. ``row_key`` identifies the combination."""

    id = peewee.AutoField()
    row_key = peewee.CharField(max_length=64, unique=True)
    day = peewee.CharField(max_length=10)
    policy_domain = peewee.CharField(max_length=255)
    policy_type = peewee.CharField(max_length=16)
    policy_strings = peewee.TextField()
    mx_host = peewee.CharField(max_length=255)
    result_type = peewee.CharField(max_length=40)
    detail = peewee.TextField()
    sessions = peewee.IntegerField()
    updated_at = peewee.BigIntegerField()

    class Meta:
        indexes = ((("day", "policy_domain"), False),)


class TlsReport(BaseModel):
    """One TLS-RPT report of a ``day`` for a policy domain: claimed by the first worker to
    send it (``status`` ``sending``, then ``sent`` or ``failed``)."""

    id = peewee.AutoField()
    day = peewee.CharField(max_length=10)
    policy_domain = peewee.CharField(max_length=255)
    status = peewee.CharField(max_length=16)
    report_id = peewee.CharField(max_length=200)
    rua = peewee.TextField()
    detail = peewee.TextField()
    created_at = peewee.BigIntegerField()

    class Meta:
        indexes = ((("day", "policy_domain"), True),)


MODELS.extend([MtaStsPolicy, TlsSessionResult, TlsReport])


class BreakerCount(BaseModel):
    """The circuit breaker's counters (docs/api.md, "Streams and the circuit breaker"): messages
    that reached a final answer, hard bounces and complaints of one account, in one ``bucket`` of
    ``BUCKET_MS``. ``domain`` is the From domain, or '' for the account as a whole. Written with the
    events they count (``layang.mail.events``), so every process sees the same rates."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    domain = peewee.CharField(max_length=253)
    bucket = peewee.BigIntegerField()
    sent = peewee.IntegerField(default=0)
    hard_bounces = peewee.IntegerField(default=0)
    complaints = peewee.IntegerField(default=0)

    class Meta:
        indexes = ((("account", "domain", "bucket"), True),)


class BreakerState(BaseModel):
    """Where the breaker of an account (``domain`` '') or of one of its From domains stands:
    ``level`` 0 clear, 1 warned, 2 broadcast paused. It only rises until
    ``layang accounts resume``; ``reason`` names the rate that raised it."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    domain = peewee.CharField(max_length=253)
    level = peewee.IntegerField(default=0)
    reason = peewee.TextField(default="")
    changed_at = peewee.BigIntegerField(default=now_ms)

    class Meta:
        indexes = ((("account", "domain"), True),)


MODELS.extend([BreakerCount, BreakerState])


class DmarcReport(BaseModel):
    """One DMARC aggregate report (RFC 7489) received for a domain: who sent it, which
    period it covers. Unique per reporter and report id, so a report sent twice counts once."""

    domain = peewee.CharField(max_length=253, index=True)
    org_name = peewee.TextField()
    report_id = peewee.CharField(max_length=255)
    begins_at = peewee.BigIntegerField()
    ends_at = peewee.BigIntegerField()
    received_at = peewee.BigIntegerField(default=now_ms)
    # The account that had ``domain`` verified when the report came: only it sees the figures.
    account = peewee.ForeignKeyField(Account, null=True, on_delete="CASCADE")

    class Meta:
        indexes = ((("org_name", "report_id"), True),)


class DmarcRecord(BaseModel):
    """One row of a DMARC report: ``count`` messages from ``source_ip`` with their results.
    ``dkim_domains`` are the DKIM signing domains that passed, between commas."""

    report = peewee.ForeignKeyField(DmarcReport, on_delete="CASCADE")
    domain = peewee.CharField(max_length=253)
    begins_at = peewee.BigIntegerField()
    source_ip = peewee.CharField(max_length=45)
    count = peewee.IntegerField()
    disposition = peewee.CharField(max_length=16)
    dkim = peewee.CharField(max_length=16)
    spf = peewee.CharField(max_length=16)
    dkim_aligned = peewee.IntegerField()
    spf_aligned = peewee.IntegerField()
    header_from = peewee.CharField(max_length=253)
    dkim_domains = peewee.TextField(default="")

    class Meta:
        indexes = ((("domain", "begins_at"), False),)


MODELS.extend([DmarcReport, DmarcRecord])


class ActivityCount(BaseModel):
    """How many events of one ``kind`` an account's mail of one ``stream`` from one sending
    ``domain`` had in one ``hour`` (epoch ms at its start): the overview's figures. Written only
    by the database's triggers as recipients and events are stored (docs/schema.sql),
    never by the code; ``kind`` is an event status, with a Bounce's class after a colon
    (``Bounce:hard``)."""

    id = peewee.AutoField()
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    hour = peewee.BigIntegerField()
    domain = peewee.CharField(max_length=253)
    kind = peewee.CharField(max_length=32)
    count = peewee.BigIntegerField()
    stream = peewee.CharField(
        max_length=16, default=TRANSACTIONAL, constraints=[peewee.SQL("DEFAULT 'transactional'")]
    )

    class Meta:
        indexes = ((("account", "hour", "domain", "stream", "kind"), True),)


MODELS.append(ActivityCount)


class TrackingDomain(BaseModel):
    """An account's own domain for its tracked links and pixel (CONTRACT section 23):
    ``pending`` until its CNAME to the service is found, then ``verified``. ``found`` is what
    the last check saw."""

    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    domain = peewee.CharField(max_length=253)
    status = peewee.CharField(max_length=16)
    created_at = peewee.BigIntegerField(default=now_ms)
    checked_at = peewee.BigIntegerField(null=True)
    found = peewee.TextField(null=True)

    class Meta:
        indexes = (
            (("account", "domain"), True),
            (("domain", "status"), False),
        )


MODELS.append(TrackingDomain)


class ActivityTagCount(BaseModel):
    """As :class:`ActivityCount`, per tag of the mail (one recipient with two tags counts
    under each): the overview's figures per tag, written only by the database's triggers."""

    id = peewee.AutoField()
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE", index=False)
    hour = peewee.BigIntegerField()
    tag = peewee.CharField(max_length=64)
    kind = peewee.CharField(max_length=32)
    count = peewee.BigIntegerField()

    class Meta:
        indexes = ((("account", "hour", "tag", "kind"), True),)


MODELS.append(ActivityTagCount)


class AuditEntry(BaseModel):
    """One change made by a person or an API key (CONTRACT section 21): ``at`` (epoch ms),
    ``actor`` ("user:<email>", "key:<id>" or "system"), ``action`` (a dotted verb such as
    ``template.updated``, ``recipient.erased``), ``target`` (what was changed; never a
    recipient's address, an erasure names its SHA-256), ``source`` (the client's IP address, or
    "cli"), ``detail`` (a JSON object). Written by ``layang.domain.audit.record``."""

    id = peewee.AutoField()
    account = peewee.ForeignKeyField(Account, null=True, on_delete="CASCADE", index=False)
    at = peewee.BigIntegerField()
    actor = peewee.CharField(max_length=320)
    action = peewee.CharField(max_length=64)
    target = peewee.CharField(max_length=512)
    source = peewee.CharField(max_length=64)
    detail = peewee.TextField()

    class Meta:
        indexes = ((("account", "at"), False), (("at",), False))


MODELS.append(AuditEntry)


OWNER = "owner"
ADMIN = "admin"
DEVELOPER = "developer"
VIEWER = "viewer"
# Weakest first: a role may do all that the roles before it may.
ROLES = (VIEWER, DEVELOPER, ADMIN, OWNER)


class ConsoleUser(BaseModel):
    """A person who signs in to the console (CONTRACT section 21). ``password_hash`` is an
    argon2id PHC string (None until the set-up link is used), ``totp_seed`` the RFC 6238 seed
    sealed with ``layang.sealing`` (None until enrolled), ``totp_last_step`` the RFC 6238 time
    step of the last code accepted (a code works once); ``failed_passwords`` counts wrong
    passwords since the last right one, ``locked_until`` (epoch ms) ends a lockout."""

    id = peewee.CharField(primary_key=True, max_length=32)
    email = peewee.CharField(max_length=320)
    email_key = peewee.CharField(max_length=320, unique=True)
    password_hash = peewee.CharField(max_length=255, null=True)
    totp_seed = peewee.BlobField(null=True)
    totp_last_step = peewee.BigIntegerField(null=True)
    failed_passwords = peewee.IntegerField(default=0, constraints=[peewee.SQL("DEFAULT 0")])
    locked_until = peewee.BigIntegerField(null=True)
    created_at = peewee.BigIntegerField()
    password_changed_at = peewee.BigIntegerField(null=True)


class Membership(BaseModel):
    """A person's place in an account: their ``role`` there (one of ``ROLES``)."""

    id = peewee.AutoField()
    user = peewee.ForeignKeyField(ConsoleUser, on_delete="CASCADE", index=False)
    account = peewee.ForeignKeyField(Account, on_delete="CASCADE")
    role = peewee.CharField(max_length=16)
    created_at = peewee.BigIntegerField()

    class Meta:
        indexes = ((("user", "account"), True),)


class UserToken(BaseModel):
    """A one-time link's token (its SHA-256 as ``id``): ``purpose`` is "setup" (the first
    password of a user made on the command line), "invite" (joining ``account`` as ``role``) or
    "reset" (a new password); ``used_at`` ends it, as does ``expires_at``."""

    id = peewee.CharField(primary_key=True, max_length=64)
    purpose = peewee.CharField(max_length=16)
    email = peewee.CharField(max_length=320)
    user = peewee.ForeignKeyField(ConsoleUser, null=True, on_delete="CASCADE", index=False)
    account = peewee.ForeignKeyField(Account, null=True, on_delete="CASCADE")
    role = peewee.CharField(max_length=16, null=True)
    created_by = peewee.CharField(max_length=320)
    created_at = peewee.BigIntegerField()
    expires_at = peewee.BigIntegerField(index=True)
    used_at = peewee.BigIntegerField(null=True)


class UserSession(BaseModel):
    """A person's signed-in console session (the cookie holds a random token, ``id`` its
    SHA-256), in the account they are looking at; ``source`` is the address it signed in from."""

    id = peewee.CharField(primary_key=True, max_length=64)
    user = peewee.ForeignKeyField(ConsoleUser, on_delete="CASCADE")
    account = peewee.ForeignKeyField(Account, null=True, on_delete="SET NULL", index=False)
    created_at = peewee.BigIntegerField()
    seen_at = peewee.BigIntegerField()
    expires_at = peewee.BigIntegerField(index=True)
    source = peewee.CharField(max_length=64)
    user_agent = peewee.CharField(max_length=200)


class SignInWindow(BaseModel):
    """How many sign-in attempts one address or one client IP (``key``) made in one window."""

    key = peewee.CharField(max_length=400)
    starts_at = peewee.BigIntegerField()
    ends_at = peewee.BigIntegerField(index=True)
    count = peewee.IntegerField()

    class Meta:
        primary_key = peewee.CompositeKey("key", "starts_at")


MODELS.extend([ConsoleUser, Membership, UserToken, UserSession, SignInWindow])


class Passkey(BaseModel):
    """A console user's passkey (a WebAuthn credential): ``id`` the credential id (base64url),
    ``public_key`` its COSE public key, ``sign_count`` the authenticator's counter."""

    id = peewee.CharField(primary_key=True, max_length=1400)
    user = peewee.ForeignKeyField(ConsoleUser, on_delete="CASCADE")
    public_key = peewee.BlobField()
    sign_count = peewee.BigIntegerField()
    label = peewee.CharField(max_length=100)
    created_at = peewee.BigIntegerField()
    used_at = peewee.BigIntegerField(null=True)


MODELS.append(Passkey)
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


MODELS.extend([InboundDomain, InboundRoute, InboundEmail])
