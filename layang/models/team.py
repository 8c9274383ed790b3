"""The people who sign in to the console and what they leave: users, their memberships and
roles, one-time links, sessions (a person's, or one opened with an API key), sign-in
counters, passkeys, and the audit log."""

from __future__ import annotations

import peewee

from layang.models.accounts import Account, ApiKey
from layang.models.base import BaseModel

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


class ConsoleSession(BaseModel):
    """A signed-in console session, so that signing out ends it on the server: the cookie
    holds a random token, this table its SHA-256 (``id``); no row, no session."""

    id = peewee.CharField(primary_key=True, max_length=64)
    key = peewee.ForeignKeyField(ApiKey, on_delete="CASCADE")
    created_at = peewee.BigIntegerField()
    expires_at = peewee.BigIntegerField(index=True)


class AuditEntry(BaseModel):
    """One change made by a person or an API key (CONTRACT section 21): ``at`` (epoch ms),
    ``actor`` ("user:<email>", "key:<id>" or "system"), ``action`` (a dotted verb such as
    ``template.updated``, ``recipient.erased``), ``target`` (what was changed; never a
    recipient's address, an erasure names its SHA-256), ``source`` (the client's IP address, or
    "cli"), ``detail`` (a JSON object). Written by ``layang.team.audit.record``."""

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
