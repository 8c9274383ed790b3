"""``layang keys``: an account's API keys, created, listed (never their secrets) and
revoked."""

from __future__ import annotations

import click

from layang.cli.output import domain_errors, emit
from layang.cli.startup import account_named, open_db, prepare
from layang.cli.uses import STORE, Uses
from layang.clock import iso_ms
from layang.domain import accounts
from layang.domain.errors import NotFound
from layang.models import FULL, SCOPES
from layang.serving.preflight import EXISTING, Needs, database_location


@click.group("keys")
def keys_group() -> None:
    """API keys."""


@Uses(Needs(EXISTING), STORE)
@keys_group.command("create")
@click.argument("name")
@click.option("--label", default="", help="A note to tell keys apart.")
@click.option(
    "--scope",
    type=click.Choice(SCOPES),
    default=FULL,
    show_default=True,
    help="full: everything; send: only submit mail (API send, SMTP); read: only GET.",
)
def keys_create(name: str, label: str, scope: str) -> None:
    """New API key for account NAME; prints {"id", "key", "account", "scope"} (the key only
    here)."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        key, secret = accounts.create_api_key(account_named(name, config), label, scope)
    emit({"id": key.id, "key": secret, "account": name, "scope": key.scope})


@Uses(Needs(EXISTING), STORE)
@keys_group.command("list")
@click.argument("name")
def keys_list(name: str) -> None:
    """List the keys of account NAME (never their secrets)."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        keys = accounts.list_api_keys(account_named(name, config))
    emit(
        [
            {
                "id": k.id,
                "label": k.label,
                "prefix": k.prefix,
                "scope": k.scope,
                "createdAt": iso_ms(k.created_at),
                "revokedAt": iso_ms(k.revoked_at) if k.revoked_at else None,
            }
            for k in keys
        ]
    )


@Uses(Needs(EXISTING), STORE)
@keys_group.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke a key at once."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        try:
            key = accounts.revoke_api_key(key_id)
        except NotFound as error:
            where = database_location(config.database_url)
            raise NotFound(f"{error.message.rstrip('.')} in {where}.") from None
    emit({"id": key.id, "revokedAt": iso_ms(key.revoked_at)})
