"""Bringing someone into an account (CONTRACT section 21): a user made on the command line with
a set-up link, an invitation mailed by an owner or admin, the invitations still open, and the
joining once an invitation's link is used (``passwords.set_password_by_link``). An invitation is
answered the same whether or not the address is a user or a member already."""

from __future__ import annotations

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.errors import Conflict
from layang.models import Account, ConsoleUser, Membership, UserToken
from layang.team import audit, console_mail, links
from layang.team.people import (
    check_role,
    guard_owner_change,
    membership_of,
    new_user,
    normalize_email,
    user_by_email,
)


def create_user(
    email: str, account: Account, role: str, *, actor: str = audit.CLI, source: str = audit.CLI
) -> tuple[ConsoleUser, str]:
    """Make ``email`` a member of ``account`` as ``role`` (creating the user when new) and a
    one-time set-up link token (72 h) for choosing a password. Raises ``InvalidInput`` (email,
    role) and ``Conflict`` when the user is a member already."""
    email = normalize_email(email)
    check_role(role)
    with write_transaction():
        user = user_by_email(email) or new_user(email)
        if membership_of(user, account) is not None:
            raise Conflict(f"{email} is already a member of {account.name}.")
        Membership.create(user=user, account=account, role=role, created_at=now_ms())
        token = links.issue_link(links.SETUP, email, actor, user=user, account=account, role=role)
        audit.record(account, actor, "user.created", email, source=source, detail={"role": role})
    return user, token


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
    guard_owner_change(actor_role, role)
    with write_transaction():
        audit.record(
            account, actor, "invitation.created", email, source=source, detail={"role": role}
        )
        user = user_by_email(email)
        if user is not None and membership_of(user, account) is not None:
            return
        token = links.issue_link(links.INVITE, email, actor, user=user, account=account, role=role)
        console_mail.send(
            account,
            email,
            f"You are invited to {account.name} on Layang",
            f"{actor.partition(':')[2]} invited you to the Layang account {account.name} as "
            f"{role}.\n\nAccept and choose your password here (the link works once, for 72 "
            f"hours):\n{links.link_url(config, links.INVITE, token)}\n\nIf you did not expect "
            "this, ignore this email.\n",
            "invitation",
            config,
        )


def pending_invitations(account: Account) -> list[UserToken]:
    return list(
        UserToken.select()
        .where(
            (UserToken.account == account)
            & (UserToken.purpose == links.INVITE)
            & UserToken.used_at.is_null()
            & (UserToken.expires_at > now_ms())
        )
        .order_by(UserToken.created_at.desc())
    )


def accept(link: UserToken, user: ConsoleUser, source: str) -> None:
    """Make ``user`` a member of the invitation ``link``'s account with its role, unless they
    are one already; audited. Called in the transaction that spends the link."""
    if membership_of(user, link.account_id) is not None:
        return
    Membership.create(user=user, account=link.account_id, role=link.role, created_at=now_ms())
    audit.record(
        link.account_id,
        audit.user_actor(user.email),
        "invitation.accepted",
        user.email,
        source=source,
        detail={"role": link.role},
    )
