"""Mail as accepted and as recorded: transmissions, their tags and stored payloads, one
recipient row per email (the outbox and its activity record), its events, and the
suppression list."""

from __future__ import annotations

import peewee

from layang.clock import now_ms
from layang.ids import new_id
from layang.models.accounts import Account
from layang.models.base import BaseModel

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
