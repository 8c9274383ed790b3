"""Console sessions kept on the server: the session cookie (signed, not secret) carries a random
token, the database its SHA-256, so that signing out ends the session for good, even for
someone holding a copy of the cookie. A session lasts ``LIFETIME_MS`` and ends with its key."""

from __future__ import annotations

import hashlib
import secrets

from layang.clock import now_ms
from layang.db import write_transaction
from layang.models import SEND, Account, ApiKey, ConsoleSession

LIFETIME_MS = 12 * 3600 * 1000


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def open_session(key_id: str) -> str:
    """Start a session for the API key ``key_id``; returns the token for the cookie."""
    token = secrets.token_urlsafe(32)
    now = now_ms()
    with write_transaction(durable=False):
        ConsoleSession.insert(
            id=_digest(token), key=key_id, created_at=now, expires_at=now + LIFETIME_MS
        ).execute()
    return token


def session_key(token: str) -> ApiKey | None:
    """The live key (with its account) of the session ``token`` names, or None when the
    session ended, expired, or its key was revoked (or may only send)."""
    return (
        ApiKey.select(ApiKey, Account)
        .join(Account)
        .switch(ApiKey)
        .join(ConsoleSession)
        .where(
            (ConsoleSession.id == _digest(token))
            & (ConsoleSession.expires_at > now_ms())
            & ApiKey.revoked_at.is_null()
            & (ApiKey.scope != SEND)
        )
        .first()
    )


def end_session(token: str) -> None:
    """End the session ``token`` names (signing out)."""
    with write_transaction(durable=False):
        ConsoleSession.delete().where(ConsoleSession.id == _digest(token)).execute()


def delete_expired(now: int) -> int:
    """Delete sessions past their lifetime; returns how many."""
    with write_transaction(durable=False):
        return ConsoleSession.delete().where(ConsoleSession.expires_at <= now).execute()
