"""People who sign in to the console (CONTRACT section 21): users, their memberships of accounts
with a role, and the changes owners and admins make to the team (roles, removals). Passwords,
second factors, sessions and the one-time links that bring someone in have modules of their own
beside this one."""

from __future__ import annotations

import secrets

from layang.clock import now_ms
from layang.db import write_transaction
from layang.domain.errors import Conflict, InvalidInput, NotFound, RoleNeeded
from layang.mail.message import InvalidAddress, normalize_address
from layang.models import OWNER, ROLES, Account, ConsoleUser, Membership, UserSession
from layang.team import audit


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


def user_by_email(email: str) -> ConsoleUser | None:
    return ConsoleUser.get_or_none(ConsoleUser.email_key == email.strip().lower())


def get_user(user_id: str) -> ConsoleUser:
    user = ConsoleUser.get_or_none(ConsoleUser.id == user_id)
    if user is None:
        raise NotFound(f"No user {user_id!r}.")
    return user


def new_user(email: str) -> ConsoleUser:
    """Store a user for ``email`` (an address already normalized), with no password yet."""
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


# The team -------------------------------------------------------------------------------


def team(account: Account) -> list[Membership]:
    """The account's members with their users, by address."""
    return list(
        Membership.select(Membership, ConsoleUser)
        .join(ConsoleUser)
        .where(Membership.account == account)
        .order_by(ConsoleUser.email_key)
    )


def guard_owner_change(actor_role: str, role: str) -> None:
    """Raise ``RoleNeeded`` when someone other than an owner would give or touch ``role``
    owner: admins may do everything but touch owners (CONTRACT section 21)."""
    if role == OWNER and actor_role != OWNER:
        raise RoleNeeded(OWNER)


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
        guard_owner_change(actor_role, role)
        guard_owner_change(actor_role, membership.role)
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
        guard_owner_change(actor_role, membership.role)
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
