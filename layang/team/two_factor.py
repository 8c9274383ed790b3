"""Second factors (CONTRACT section 21): TOTP (RFC 6238), its seed sealed at rest and each code
accepted once; whether a user has a second factor (TOTP or a passkey, ``passkeys``); and an
account's rule that its members must have one."""

from __future__ import annotations

import hmac
import time

import pyotp

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.errors import InvalidInput
from layang.models import Account, ConsoleUser, Membership, Passkey
from layang.sealing import seal, unseal
from layang.team import audit
from layang.team.people import memberships


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


def with_second_factor(account: Account) -> set[str]:
    """The ids of the account's members who have TOTP or a passkey."""
    members = Membership.select(Membership.user).where(Membership.account == account)
    totp = ConsoleUser.select(ConsoleUser.id).where(
        ConsoleUser.id.in_(members) & ConsoleUser.totp_seed.is_null(False)
    )
    keyed = Passkey.select(Passkey.user).where(Passkey.user.in_(members))
    return {row.id for row in totp} | {row.user_id for row in keyed}


def two_factor_required(user: ConsoleUser) -> bool:
    """Whether any account of the user requires a second factor."""
    return (
        Account.select()
        .join(Membership)
        .where((Membership.user == user) & Account.two_factor_required_at.is_null(False))
        .exists()
    )


def require_two_factor(account: Account, required: bool, *, actor: str, source: str) -> None:
    """Require (or stop requiring) a second factor of every member of ``account``; audited."""
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
