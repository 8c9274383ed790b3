"""``layang users``: the people who sign in to the console (CONTRACT section 21). The first
owner of an account is made here; the others are invited from the console."""

from __future__ import annotations

import click

from layang.cli.output import domain_errors, emit
from layang.cli.startup import account_named, open_db, prepare
from layang.cli.uses import STORE, Uses
from layang.clock import iso_ms, now_ms
from layang.models import OWNER, ROLES
from layang.serving.preflight import EXISTING, Needs
from layang.team import invitations, links, people


@click.group("users")
def users_group() -> None:
    """People who sign in to the console."""


@Uses(Needs(EXISTING), STORE, ("public_url",))
@users_group.command("create")
@click.argument("email")
@click.option("--account", "account_name", required=True, help="The account they join.")
@click.option(
    "--role",
    type=click.Choice(ROLES),
    default=OWNER,
    show_default=True,
    help="owner: everything; admin: all but owners; developer: sending and its settings; "
    "viewer: reads only.",
)
def users_create(email: str, account_name: str, role: str) -> None:
    """Make EMAIL a member of an account and print a one-time set-up link (72 h) where they
    choose a password and a second factor; prints {"id", "email", "account", "role",
    "setupLink", "expiresAt"}."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        account = account_named(account_name, config)
        user, token = invitations.create_user(email, account, role)
    emit(
        {
            "id": user.id,
            "email": user.email,
            "account": account.name,
            "role": role,
            "setupLink": links.link_url(config, links.SETUP, token),
            "expiresAt": iso_ms(now_ms() + links.LINK_LIFETIME_MS[links.SETUP]),
        }
    )


@Uses(Needs(EXISTING), STORE)
@users_group.command("list")
@click.option("--account", "account_name", required=True, help="The account to list.")
def users_list(account_name: str) -> None:
    """The members of an account: [{"id", "email", "role", "twoFactor"}]."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        members = people.team(account_named(account_name, config))
    emit(
        [
            {
                "id": m.user.id,
                "email": m.user.email,
                "role": m.role,
                "twoFactor": m.user.totp_seed is not None,
            }
            for m in members
        ]
    )
