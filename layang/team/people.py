"""People who sign in to the console (CONTRACT section 21): users, their passwords (argon2id)
and second factor (TOTP, RFC 6238), their memberships of accounts with a role, the one-time
links that set a password or bring someone in, and their sessions.

Answers never tell whether an address belongs to a user: a wrong address and a wrong password
fail alike and take as long (a password is checked against a stand-in hash when there is no
user); a reset or an invitation is answered the same either way.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import secrets
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import argon2
import pyotp

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_relaxed, write_transaction
from layang.domain.errors import Conflict, InvalidInput, NotFound, RoleNeeded
from layang.mail.message import InvalidAddress, Mailbox, OutgoingMessage, normalize_address
from layang.mail.outbox import queue_message
from layang.models import (
    OWNER,
    ROLES,
    Account,
    ConsoleUser,
    Membership,
    Passkey,
    SignInWindow,
    UserSession,
    UserToken,
)
from layang.sealing import seal, unseal
from layang.team import audit

SETUP, INVITE, RESET = "setup", "invite", "reset"
LINK_LIFETIME_MS = {SETUP: 72 * 3600_000, INVITE: 72 * 3600_000, RESET: 3600_000}
LOCK_AFTER = 10  # wrong passwords in a row
LOCK_MS = 15 * 60_000
SESSION_MS = 12 * 3600_000
PASSWORD_MIN, PASSWORD_MAX = 10, 1024
# Sign-in attempts allowed per window: per address typed, and per client IP address.
THROTTLE_WINDOW_MS = 15 * 60_000
PER_ADDRESS, PER_SOURCE = 20, 100

# argon2-cffi's defaults are RFC 9106's second recommended option (argon2id, 64 MiB, t=3).
_hasher = argon2.PasswordHasher()
_STAND_IN = _hasher.hash(secrets.token_urlsafe(16))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def role_allows(role: str, needed: str) -> bool:
    """Whether ``role`` may do what needs ``needed`` (``ROLES`` is weakest first)."""
    return ROLES.index(role) >= ROLES.index(needed)


def normalize_email(email: str) -> str:
    """``email`` as a user's address; ``InvalidInput`` on field ``email`` when it is not one."""
    try:
        return normalize_address(email)
    except InvalidAddress as error:
        raise InvalidInput("email", str(error)) from None


def check_role(role: str) -> str:
    if role not in ROLES:
        raise InvalidInput("role", f"Use one of {', '.join(ROLES)}.")
    return role


def check_password(password: str) -> None:
    """Raise ``InvalidInput`` on field ``password`` unless it is 10 to 1024 characters."""
    if not PASSWORD_MIN <= len(password) <= PASSWORD_MAX:
        raise InvalidInput(
            "password", f"Use {PASSWORD_MIN} to {PASSWORD_MAX} characters; a phrase is fine."
        )


def user_by_email(email: str) -> ConsoleUser | None:
    return ConsoleUser.get_or_none(ConsoleUser.email_key == email.strip().lower())


def get_user(user_id: str) -> ConsoleUser:
    user = ConsoleUser.get_or_none(ConsoleUser.id == user_id)
    if user is None:
        raise NotFound(f"No user {user_id!r}.")
    return user


def _new_user(email: str) -> ConsoleUser:
    return ConsoleUser.create(
        id="usr_" + secrets.token_hex(8),
        email=email,
        email_key=email.lower(),
        created_at=now_ms(),
    )


def any_users() -> bool:
    """Whether anyone at all can sign in with a password here."""
    return ConsoleUser.select().exists()


def account_has_users(account: Account | int) -> bool:
    return Membership.select().where(Membership.account == account).exists()


def membership_of(user: ConsoleUser | str, account: Account | int) -> Membership | None:
    return (
        Membership.select(Membership, Account)
        .join(Account)
        .where((Membership.user == user) & (Membership.account == account))
        .first()
    )


def memberships(user: ConsoleUser | str) -> list[Membership]:
    """The user's memberships with their accounts, by account name."""
    return list(
        Membership.select(Membership, Account)
        .join(Account)
        .where(Membership.user == user)
        .order_by(Account.name)
    )


# One-time links -------------------------------------------------------------------------


def _issue_link(
    purpose: str,
    email: str,
    created_by: str,
    *,
    user: ConsoleUser | None = None,
    account: Account | None = None,
    role: str | None = None,
) -> str:
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


def _spend_link(link: UserToken) -> bool:
    # Whoever spends it first wins: the row changes only while still unused.
    spent = (
        UserToken.update(used_at=now_ms())
        .where((UserToken.id == link.id) & UserToken.used_at.is_null())
        .execute()
    )
    return spent == 1


def create_user(
    email: str, account: Account, role: str, *, actor: str = audit.CLI, source: str = audit.CLI
) -> tuple[ConsoleUser, str]:
    """Make ``email`` a member of ``account`` as ``role`` (creating the user when new) and a
    one-time set-up link token (72 h) for choosing a password. Raises ``InvalidInput`` (email,
    role) and ``Conflict`` when the user is a member already."""
    email = normalize_email(email)
    check_role(role)
    with write_transaction():
        user = user_by_email(email) or _new_user(email)
        if membership_of(user, account) is not None:
            raise Conflict(f"{email} is already a member of {account.name}.")
        Membership.create(user=user, account=account, role=role, created_at=now_ms())
        token = _issue_link(SETUP, email, actor, user=user, account=account, role=role)
        audit.record(account, actor, "user.created", email, source=source, detail={"role": role})
    return user, token


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
        link = open_link(token, purpose)
        if link is None or not _spend_link(link):
            raise NotFound("This link has been used or has expired.")
        user = link.user or user_by_email(link.email) or _new_user(link.email)
        if purpose == INVITE and membership_of(user, link.account_id) is None:
            Membership.create(
                user=user, account=link.account_id, role=link.role, created_at=now_ms()
            )
            audit.record(
                link.account_id,
                audit.user_actor(user.email),
                "invitation.accepted",
                user.email,
                source=source,
                detail={"role": link.role},
            )
        if password_hash is None:
            if user.password_hash is None:
                raise InvalidInput("password", "Choose a password.")
            return user
        _store_password(user, password_hash)
        UserSession.delete().where(UserSession.user == user).execute()
        for account in {m.account_id for m in memberships(user)}:
            audit.record(
                account, audit.user_actor(user.email), "password.set", user.email, source=source
            )
    return user


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
        UserSession.delete().where(
            (UserSession.user == user) & (UserSession.id != _digest(keep_session))
        ).execute()
        for account in {m.account_id for m in memberships(user)}:
            audit.record(
                account, audit.user_actor(user.email), "password.changed", user.email, source=source
            )


# Signing in -------------------------------------------------------------------------------


def _verify(password_hash: str | None, password: str) -> bool:
    try:
        return _hasher.verify(password_hash or _STAND_IN, password) and bool(password_hash)
    except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
        return False


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


def has_totp(user: ConsoleUser) -> bool:
    return user.totp_seed is not None


def _seed_context(user: ConsoleUser) -> str:
    return f"totp:{user.id}"


def new_totp_seed() -> str:
    """A fresh RFC 6238 seed (base32, 160 bits, as authenticator apps expect)."""
    return pyotp.random_base32(32)


def totp_uri(user: ConsoleUser, seed: str, issuer: str = "Layang") -> str:
    """The ``otpauth://`` URI an authenticator app reads (its QR code)."""
    return pyotp.TOTP(seed).provisioning_uri(name=user.email, issuer_name=issuer)


def _matching_step(seed: str, code: str, now: float | None = None) -> int | None:
    """The RFC 6238 time step whose code ``code`` is, within one step either side of now (RFC
    6238 section 5.2 allows for drift), or None. Compared in constant time."""
    code = code.strip().replace(" ", "")
    if len(code) != 6 or not code.isdigit():
        return None
    totp = pyotp.TOTP(seed)
    current = totp.timecode(time.time() if now is None else now)
    found = None
    for step in (current - 1, current, current + 1):
        if hmac.compare_digest(totp.generate_otp(step), code):
            found = step
    return found


def _accept_step(user: ConsoleUser, step: int) -> bool:
    # A code works once (RFC 6238 section 5.2): only a step later than the last one accepted
    # passes, and the update decides between two sign-ins racing with the same code.
    accepted = (
        ConsoleUser.update(totp_last_step=step)
        .where(
            (ConsoleUser.id == user.id)
            & (ConsoleUser.totp_last_step.is_null() | (ConsoleUser.totp_last_step < step))
        )
        .execute()
    )
    return accepted == 1


def enrol_totp(user: ConsoleUser, seed: str, code: str, config: Config, source: str) -> None:
    """Store ``seed`` (sealed) as the user's second factor once ``code`` shows the app has it.
    Raises ``InvalidInput`` on field ``code``."""
    step = _matching_step(seed, code)
    if step is None:
        raise InvalidInput("code", "That code does not match; check the app's clock and retry.")
    sealed = seal(seed.encode(), config.secret_key, _seed_context(user))
    with write_transaction():
        ConsoleUser.update(totp_seed=sealed, totp_last_step=step).where(
            ConsoleUser.id == user.id
        ).execute()
        for account in {m.account_id for m in memberships(user)}:
            audit.record(
                account,
                audit.user_actor(user.email),
                "two_factor.enrolled",
                user.email,
                source=source,
            )


def check_totp(user: ConsoleUser, code: str, config: Config) -> bool:
    """Whether ``code`` is the user's current TOTP code, not used before."""
    if user.totp_seed is None:
        return False
    seed = unseal(user.totp_seed, config.secret_key, _seed_context(user)).decode()
    step = _matching_step(seed, code)
    return step is not None and _accept_step(user, step)


def has_second_factor(user: ConsoleUser) -> bool:
    """Whether the user has TOTP or a passkey."""
    return has_totp(user) or Passkey.select().where(Passkey.user == user).exists()


def two_factor_required(user: ConsoleUser) -> bool:
    """Whether any account of the user requires a second factor."""
    return (
        Account.select()
        .join(Membership)
        .where((Membership.user == user) & Account.two_factor_required_at.is_null(False))
        .exists()
    )


# Sessions ---------------------------------------------------------------------------------


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
    """Delete sessions, links and throttle windows past their time; returns how many."""
    with write_transaction(durable=False):
        deleted = UserSession.delete().where(UserSession.expires_at <= now).execute()
        deleted += UserToken.delete().where(UserToken.expires_at <= now - 86_400_000).execute()
        deleted += SignInWindow.delete().where(SignInWindow.ends_at <= now).execute()
    return deleted


# Team -------------------------------------------------------------------------------------


def team(account: Account) -> list[Membership]:
    """The account's members with their users, by address."""
    return list(
        Membership.select(Membership, ConsoleUser)
        .join(ConsoleUser)
        .where(Membership.account == account)
        .order_by(ConsoleUser.email_key)
    )


def with_second_factor(account: Account) -> set[str]:
    """The ids of the account's members who have TOTP or a passkey."""
    members = Membership.select(Membership.user).where(Membership.account == account)
    totp = ConsoleUser.select(ConsoleUser.id).where(
        ConsoleUser.id.in_(members) & ConsoleUser.totp_seed.is_null(False)
    )
    keyed = Passkey.select(Passkey.user).where(Passkey.user.in_(members))
    return {row.id for row in totp} | {row.user_id for row in keyed}


def pending_invitations(account: Account) -> list[UserToken]:
    return list(
        UserToken.select()
        .where(
            (UserToken.account == account)
            & (UserToken.purpose == INVITE)
            & UserToken.used_at.is_null()
            & (UserToken.expires_at > now_ms())
        )
        .order_by(UserToken.created_at.desc())
    )


def _guard_owner_change(actor_role: str, role: str) -> None:
    # Admins may do everything but touch owners (CONTRACT section 21).
    if role == OWNER and actor_role != OWNER:
        raise RoleNeeded(OWNER)


def invite(
    account: Account,
    email: str,
    role: str,
    *,
    actor: str,
    actor_role: str,
    source: str,
    config: Config,
) -> None:
    """Invite ``email`` into ``account`` as ``role``: a single-use link valid 72 h, mailed
    through Layang. The answer is the same whether or not the address is a user or a member
    already (a member gets no mail). Raises ``InvalidInput`` (email, role) and ``RoleNeeded``
    when someone other than an owner invites an owner."""
    email = normalize_email(email)
    check_role(role)
    _guard_owner_change(actor_role, role)
    with write_transaction():
        audit.record(
            account, actor, "invitation.created", email, source=source, detail={"role": role}
        )
        user = user_by_email(email)
        if user is not None and membership_of(user, account) is not None:
            return
        token = _issue_link(INVITE, email, actor, user=user, account=account, role=role)
        _mail(
            account,
            email,
            f"You are invited to {account.name} on Layang",
            f"{actor.partition(':')[2]} invited you to the Layang account {account.name} as "
            f"{role}.\n\nAccept and choose your password here (the link works once, for 72 "
            f"hours):\n{link_url(config, INVITE, token)}\n\nIf you did not expect this, ignore "
            "this email.\n",
            "invitation",
            config,
        )


def set_role(
    account: Account, user_id: str, role: str, *, actor: str, actor_role: str, source: str
) -> Membership:
    """Change a member's role. Raises ``NotFound``, ``InvalidInput`` (role), ``RoleNeeded``
    (an admin touching an owner) and ``Conflict`` when it would leave the account no owner."""
    check_role(role)
    with write_transaction():
        membership = membership_of(user_id, account)
        if membership is None:
            raise NotFound(f"No member {user_id!r}.")
        _guard_owner_change(actor_role, role)
        _guard_owner_change(actor_role, membership.role)
        if membership.role == OWNER and role != OWNER and _owners(account) == 1:
            raise Conflict("An account keeps at least one owner.")
        before = membership.role
        Membership.update(role=role).where(Membership.id == membership.id).execute()
        membership.role = role
        audit.record(
            account,
            actor,
            "member.role_changed",
            membership.user.email,
            source=source,
            detail={"from": before, "to": role},
        )
    return membership


def remove_member(
    account: Account, user_id: str, *, actor: str, actor_role: str, source: str
) -> None:
    """Take a member out of the account; their sessions there end. Same refusals as
    ``set_role``."""
    with write_transaction():
        membership = membership_of(user_id, account)
        if membership is None:
            raise NotFound(f"No member {user_id!r}.")
        _guard_owner_change(actor_role, membership.role)
        if membership.role == OWNER and _owners(account) == 1:
            raise Conflict("An account keeps at least one owner.")
        Membership.delete().where(Membership.id == membership.id).execute()
        UserSession.delete().where(
            (UserSession.user == user_id) & (UserSession.account == account)
        ).execute()
        audit.record(account, actor, "member.removed", membership.user.email, source=source)


def _owners(account: Account) -> int:
    return (
        Membership.select()
        .where((Membership.account == account) & (Membership.role == OWNER))
        .count()
    )


def require_two_factor(account: Account, required: bool, *, actor: str, source: str) -> None:
    Account.update(two_factor_required_at=now_ms() if required else None).where(
        Account.id == account.id
    ).execute()
    audit.record(
        account,
        actor,
        "account.two_factor_required",
        account.name,
        source=source,
        detail={"required": required},
    )


# Mail -------------------------------------------------------------------------------------


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
        token = _issue_link(RESET, user.email, audit.user_actor(user.email), user=user)
        for membership in mine:
            audit.record(
                membership.account_id,
                audit.user_actor(user.email),
                "password.reset_requested",
                user.email,
                source=source,
            )
        _mail(
            mine[0].account,
            user.email,
            "Reset your Layang password",
            "Someone (we hope you) asked to reset your Layang console password.\n\n"
            f"Choose a new one here (the link works once, for one hour):\n"
            f"{link_url(config, RESET, token)}\n\n"
            f"The request came from {source}. If it was not you, ignore this email.\n",
            "password-reset",
            config,
        )


def _mail_lockout(user: ConsoleUser, source: str, config: Config) -> None:
    mine = memberships(user)
    if not mine:
        return
    _mail(
        mine[0].account,
        user.email,
        "Your Layang sign-in is locked for 15 minutes",
        f"{LOCK_AFTER} wrong passwords in a row were typed for {user.email}, the last from "
        f"{source}, so signing in is locked for 15 minutes.\n\nIf that was not you, someone "
        "knows your address and is guessing: reset your password once the lock ends.\n",
        "lockout",
        config,
    )


def _sender(config: Config) -> Mailbox:
    host = urlsplit(config.public_url).hostname or "localhost"
    return Mailbox(config.console_mail_from or f"no-reply@{host}", "Layang")


def _mail(account: Account, to: str, subject: str, text: str, purpose: str, config: Config) -> str:
    """Queue a console mail through the same pipeline as every message (it shows in the
    account's Activity)."""
    paragraphs = "".join(f"<p>{html.escape(p)}</p>" for p in text.strip().split("\n\n"))
    message = OutgoingMessage(
        sender=_sender(config),
        to=(Mailbox(to, None),),
        subject=subject,
        text=text,
        html=f"<!DOCTYPE html><html><body>{paragraphs}</body></html>",
    )
    return queue_message(account, message, {"purpose": purpose}, source="console")
