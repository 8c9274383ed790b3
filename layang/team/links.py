"""The one-time links that set a password or bring someone in (CONTRACT section 21): ``SETUP``
(the first password of a user made on the command line), ``INVITE`` (joining an account) and
``RESET`` (a new password). A link carries 256 random bits; only their SHA-256 is stored, and a
link works once, until it expires (``LINK_LIFETIME_MS``)."""

from __future__ import annotations

import hashlib
import secrets

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.models import Account, ConsoleUser, UserToken

SETUP, INVITE, RESET = "setup", "invite", "reset"
LINK_LIFETIME_MS = {SETUP: 72 * 3600_000, INVITE: 72 * 3600_000, RESET: 3600_000}


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def issue_link(
    purpose: str,
    email: str,
    created_by: str,
    *,
    user: ConsoleUser | None = None,
    account: Account | None = None,
    role: str | None = None,
) -> str:
    """Store a new link of ``purpose`` for ``email`` (joining ``account`` as ``role`` for an
    invitation) and return its token, which exists nowhere else from here on."""
    token = secrets.token_urlsafe(32)  # 256 random bits
    now = now_ms()
    UserToken.create(
        id=_digest(token),
        purpose=purpose,
        email=email,
        user=user,
        account=account,
        role=role,
        created_by=created_by,
        created_at=now,
        expires_at=now + LINK_LIFETIME_MS[purpose],
    )
    return token


def link_url(config: Config, purpose: str, token: str) -> str:
    path = {SETUP: "welcome", INVITE: "invitation", RESET: "reset"}[purpose]
    return f"{config.public_url}/console/{path}/{token}"


def open_link(token: str, purpose: str) -> UserToken | None:
    """The live (unused, unexpired) link ``token`` of ``purpose``, or None."""
    if not token or len(token) > 100:
        return None
    return UserToken.get_or_none(
        (UserToken.id == _digest(token))
        & (UserToken.purpose == purpose)
        & UserToken.used_at.is_null()
        & (UserToken.expires_at > now_ms())
    )


def spend_link(link: UserToken) -> bool:
    """Mark ``link`` used; False when someone spent it first (the row changes only while still
    unused, so of two uses racing one wins)."""
    spent = (
        UserToken.update(used_at=now_ms())
        .where((UserToken.id == link.id) & UserToken.used_at.is_null())
        .execute()
    )
    return spent == 1


def delete_expired(now: int) -> int:
    """Delete links that expired more than a day before ``now`` (epoch ms); returns how many."""
    with write_transaction(durable=False):
        return UserToken.delete().where(UserToken.expires_at <= now - 86_400_000).execute()
