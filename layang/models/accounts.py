"""Accounts, their API keys, their sandbox recipients, and what their requests leave behind:
idempotency keys and rate-limit windows."""

from __future__ import annotations

import peewee

from layang.clock import now_ms
from layang.ids import new_id
from layang.models.base import BaseModel

SANDBOX = "sandbox"
LIVE = "live"

# What an API key may do (docs/api.md, "Idempotency, rate limits, key scopes"): everything, only
# submit mail, or only read.
FULL = "full"
SEND = "send"
READ = "read"
SCOPES = (FULL, SEND, READ)


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
