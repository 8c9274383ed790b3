"""A person's console sessions (CONTRACT section 21): the cookie holds a random token, the
database its SHA-256, so that signing out, a new password or leaving an account ends a session
for good, even for someone holding a copy of the cookie. A session lasts ``SESSION_MS`` and
shows one account at a time."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from layang.clock import now_ms
from layang.db import write_transaction
from layang.domain.errors import NotFound
from layang.models import Account, ConsoleUser, Membership, UserSession
from layang.team import audit
from layang.team.people import membership_of, memberships

SESSION_MS = 12 * 3600_000


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def open_session(user: ConsoleUser, account: Account | None, source: str, user_agent: str) -> str:
    """Start a session (a new token every sign-in, so a planted one never becomes valid);
    returns the token for the cookie, and audits the sign-in."""
    token = secrets.token_urlsafe(32)
    now = now_ms()
    with write_transaction():
        UserSession.create(
            id=_digest(token),
            user=user,
            account=account,
            created_at=now,
            seen_at=now,
            expires_at=now + SESSION_MS,
            source=source[:64],
            user_agent=user_agent[:200],
        )
        for membership in memberships(user):
            audit.record(
                membership.account_id,
                audit.user_actor(user.email),
                "sign_in",
                user.email,
                source=source,
            )
    return token


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A live session: its user, the account shown and the user's role there (None when the
    user belongs to no account any more)."""

    session_id: str
    user: ConsoleUser
    account: Account | None
    role: str | None


def session_of(token: str) -> SignedIn | None:
    """The live session ``token`` names, or None (ended, expired or revoked)."""
    if not token:
        return None
    row = (
        UserSession.select(UserSession, ConsoleUser)
        .join(ConsoleUser)
        .where((UserSession.id == _digest(token)) & (UserSession.expires_at > now_ms()))
        .first()
    )
    if row is None:
        return None
    membership = membership_of(row.user, row.account_id) if row.account_id else None
    if membership is None:
        mine = memberships(row.user)
        membership = mine[0] if mine else None
    now = now_ms()
    if now - row.seen_at > 60_000:  # a minute's precision is plenty for "last seen"
        UserSession.update(seen_at=now).where(UserSession.id == row.id).execute()
    return SignedIn(
        session_id=row.id,
        user=row.user,
        account=membership.account if membership else None,
        role=membership.role if membership else None,
    )


def switch_account(token: str, user: ConsoleUser, account_id: int) -> Membership:
    """Show ``account_id`` in this session. ``NotFound`` unless the user is a member."""
    membership = membership_of(user, account_id)
    if membership is None:
        raise NotFound("You are not a member of that account.")
    UserSession.update(account=account_id).where(UserSession.id == _digest(token)).execute()
    return membership


def session_id(token: str) -> str:
    """The stored id of the session ``token`` names (its SHA-256)."""
    return _digest(token) if token else ""


def end_session(token: str) -> None:
    UserSession.delete().where(UserSession.id == _digest(token)).execute()


def end_sessions(user: ConsoleUser, *, keep: str | None = None) -> None:
    """End every session of ``user`` but the one the token ``keep`` names, if given."""
    ending = UserSession.user == user
    if keep is not None:
        ending &= UserSession.id != _digest(keep)
    UserSession.delete().where(ending).execute()


def list_sessions(user: ConsoleUser) -> list[UserSession]:
    return list(
        UserSession.select()
        .where((UserSession.user == user) & (UserSession.expires_at > now_ms()))
        .order_by(UserSession.created_at.desc())
    )


def revoke_session(user: ConsoleUser, session_id: str) -> None:
    """End one of the user's own sessions. ``NotFound`` for another's or an unknown one."""
    gone = (
        UserSession.delete()
        .where((UserSession.id == session_id) & (UserSession.user == user))
        .execute()
    )
    if not gone:
        raise NotFound("No such session.")


def delete_expired(now: int) -> int:
    """Delete sessions past their time (``now`` in epoch ms); returns how many."""
    with write_transaction(durable=False):
        return UserSession.delete().where(UserSession.expires_at <= now).execute()
