"""Passwords (CONTRACT section 21): argon2id hashes, the rule a new one follows, setting one
through a one-time link or changing it, a reset mailed on request, and signing in with one,
throttled per address typed and per client address, with a lockout after ``LOCK_AFTER`` wrong
passwords in a row.

Answers never tell whether an address belongs to a user: a wrong address and a wrong password
fail alike and take as long (a password is checked against a stand-in hash when there is no
user); a reset is answered the same either way.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import argon2

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_relaxed, write_transaction
from layang.domain.errors import InvalidInput, NotFound
from layang.models import ConsoleUser, SignInWindow
from layang.team import audit, console_mail, invitations, links, sessions
from layang.team.people import memberships, new_user, user_by_email

LOCK_AFTER = 10  # wrong passwords in a row
LOCK_MS = 15 * 60_000
PASSWORD_MIN, PASSWORD_MAX = 10, 1024
# Sign-in attempts allowed per window: per address typed, and per client IP address.
THROTTLE_WINDOW_MS = 15 * 60_000
PER_ADDRESS, PER_SOURCE = 20, 100

# argon2-cffi's defaults are RFC 9106's second recommended option (argon2id, 64 MiB, t=3).
_hasher = argon2.PasswordHasher()
_STAND_IN = _hasher.hash(secrets.token_urlsafe(16))


def check_password(password: str) -> None:
    """Raise ``InvalidInput`` on field ``password`` unless it is 10 to 1024 characters."""
    if not PASSWORD_MIN <= len(password) <= PASSWORD_MAX:
        raise InvalidInput(
            "password", f"Use {PASSWORD_MIN} to {PASSWORD_MAX} characters; a phrase is fine."
        )


def _verify(password_hash: str | None, password: str) -> bool:
    try:
        return _hasher.verify(password_hash or _STAND_IN, password) and bool(password_hash)
    except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
        return False


def _store_password(user: ConsoleUser, password_hash: str) -> None:
    user.password_hash = password_hash
    user.password_changed_at = now_ms()
    user.failed_passwords = 0
    user.locked_until = None
    ConsoleUser.update(
        password_hash=password_hash,
        password_changed_at=user.password_changed_at,
        failed_passwords=0,
        locked_until=None,
    ).where(ConsoleUser.id == user.id).execute()


def set_password_by_link(
    token: str, purpose: str, password: str | None, source: str
) -> ConsoleUser:
    """Use a set-up, invitation or reset link: join its account (an invitation), set the
    password and end the user's sessions (``password`` None: an invited user who has one
    keeps it). Raises ``NotFound`` when the link is spent, expired or unknown, ``InvalidInput``
    for a password out of bounds or missing."""
    if password is not None:
        check_password(password)
    password_hash = _hasher.hash(password) if password is not None else None
    with write_transaction():
        link = links.open_link(token, purpose)
        if link is None or not links.spend_link(link):
            raise NotFound("This link has been used or has expired.")
        user = link.user or user_by_email(link.email) or new_user(link.email)
        if purpose == links.INVITE:
            invitations.accept(link, user, source)
        if password_hash is None:
            if user.password_hash is None:
                raise InvalidInput("password", "Choose a password.")
            return user
        _store_password(user, password_hash)
        sessions.end_sessions(user)
        for account in {m.account_id for m in memberships(user)}:
            audit.record(
                account, audit.user_actor(user.email), "password.set", user.email, source=source
            )
    return user


def change_password(
    user: ConsoleUser, current: str, new: str, keep_session: str, source: str
) -> None:
    """Replace the password after checking ``current``; ends every other session of the user.
    Raises ``InvalidInput`` on ``current_password`` or ``password``."""
    check_password(new)
    if not _verify(user.password_hash, current):
        raise InvalidInput("current_password", "That is not your current password.")
    with write_transaction():
        _store_password(user, _hasher.hash(new))
        sessions.end_sessions(user, keep=keep_session)
        for account in {m.account_id for m in memberships(user)}:
            audit.record(
                account, audit.user_actor(user.email), "password.changed", user.email, source=source
            )


def request_reset(email: str, source: str, config: Config) -> None:
    """Mail a single-use reset link (1 h) when ``email`` is a user; nothing otherwise. The
    caller answers the same either way."""
    user = user_by_email(email) if len(email) <= 320 else None
    if user is None:
        return
    mine = memberships(user)
    if not mine:
        return
    with write_transaction():
        token = links.issue_link(links.RESET, user.email, audit.user_actor(user.email), user=user)
        for membership in mine:
            audit.record(
                membership.account_id,
                audit.user_actor(user.email),
                "password.reset_requested",
                user.email,
                source=source,
            )
        console_mail.send(
            mine[0].account,
            user.email,
            "Reset your Layang password",
            "Someone (we hope you) asked to reset your Layang console password.\n\n"
            f"Choose a new one here (the link works once, for one hour):\n"
            f"{links.link_url(config, links.RESET, token)}\n\n"
            f"The request came from {source}. If it was not you, ignore this email.\n",
            "password-reset",
            config,
        )


# Signing in -------------------------------------------------------------------------------


def throttled(email: str, source: str, now: int | None = None) -> bool:
    """Count one sign-in attempt for the address typed and for the client address; True when
    either went past its allowance (``PER_ADDRESS``, ``PER_SOURCE`` per 15 minutes)."""
    now = now_ms() if now is None else now
    starts = now - now % THROTTLE_WINDOW_MS
    over = False
    for key, allowed in (
        (f"email:{email.strip().lower()[:320]}", PER_ADDRESS),
        (f"ip:{source}", PER_SOURCE),
    ):
        rows, _ = write_relaxed(
            'INSERT INTO "sign_in_window" ("key", "starts_at", "ends_at", "count") '
            "VALUES (?, ?, ?, 1) "
            'ON CONFLICT ("key", "starts_at") DO UPDATE SET "count" = "sign_in_window"."count" + 1 '
            'RETURNING "count"',
            (key, starts, starts + THROTTLE_WINDOW_MS),
        )
        over = over or rows[0][0] > allowed
    return over


@dataclass(frozen=True, slots=True)
class PasswordCheck:
    """What a password check found: the ``user`` when email and password match and the user
    is not locked out; ``locked_now`` when this attempt started a lockout."""

    user: ConsoleUser | None
    locked_now: bool = False


def sign_in_password(email: str, password: str, source: str, config: Config) -> PasswordCheck:
    """Check ``email`` and ``password``. The tenth wrong password in a row locks the user for
    15 minutes and mails them; while locked even the right password fails. Failures are audited
    in each of the user's accounts."""
    user = user_by_email(email) if len(email) <= 320 else None
    right = _verify(user.password_hash if user else None, password[:PASSWORD_MAX])
    if user is None:
        return PasswordCheck(None)
    now = now_ms()
    locked = user.locked_until is not None and user.locked_until > now
    if right and not locked:
        if user.failed_passwords:
            ConsoleUser.update(failed_passwords=0, locked_until=None).where(
                ConsoleUser.id == user.id
            ).execute()
        return PasswordCheck(user)
    locked_now = False
    with write_transaction():
        if not locked:
            failed = user.failed_passwords + 1
            locked_now = failed >= LOCK_AFTER
            ConsoleUser.update(
                failed_passwords=0 if locked_now else failed,
                locked_until=now + LOCK_MS if locked_now else None,
            ).where(ConsoleUser.id == user.id).execute()
        reason = "locked" if locked else "password"
        for membership in memberships(user):
            audit.record(
                membership.account_id,
                audit.user_actor(user.email),
                "sign_in.failed",
                user.email,
                source=source,
                detail={"reason": reason, "lockedNow": locked_now},
            )
        if locked_now:
            _mail_lockout(user, source, config)
    return PasswordCheck(None, locked_now=locked_now)


def _mail_lockout(user: ConsoleUser, source: str, config: Config) -> None:
    mine = memberships(user)
    if not mine:
        return
    console_mail.send(
        mine[0].account,
        user.email,
        "Your Layang sign-in is locked for 15 minutes",
        f"{LOCK_AFTER} wrong passwords in a row were typed for {user.email}, the last from "
        f"{source}, so signing in is locked for 15 minutes.\n\nIf that was not you, someone "
        "knows your address and is guessing: reset your password once the lock ends.\n",
        "lockout",
        config,
    )


def delete_expired(now: int) -> int:
    """Delete the sign-in counters of windows that ended by ``now`` (epoch ms); returns how
    many."""
    with write_transaction(durable=False):
        return SignInWindow.delete().where(SignInWindow.ends_at <= now).execute()
