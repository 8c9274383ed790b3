"""``layang accounts``: an account created, and the circuit breaker's pause of one lifted;
``accounts set`` (retention) lives in ``layang.cli.retention``."""

from __future__ import annotations

import click

from layang.cli.output import domain_errors, emit
from layang.cli.startup import account_named, open_db, prepare
from layang.cli.uses import STORE, Uses
from layang.domain import accounts, breaker
from layang.serving.preflight import CREATE, EXISTING, Needs


@click.group("accounts")
def accounts_group() -> None:
    """Accounts."""


@Uses(Needs(CREATE), STORE)
@accounts_group.command("create")
@click.argument("name")
@click.option("--live", is_flag=True, help="A live account (default: sandbox).")
def accounts_create(name: str, live: bool) -> None:
    """Create an account; prints {"id", "name", "mode"}."""
    open_db(prepare()[0])
    with domain_errors():
        account = accounts.create_account(name, live=live)
    emit({"id": account.id, "name": account.name, "mode": account.mode})


@Uses(Needs(EXISTING), STORE)
@accounts_group.command("resume")
@click.argument("name")
def accounts_resume(name: str) -> None:
    """Lift the circuit breaker's pause of account NAME and its domains, starting their 24 h
    window afresh; prints {"account", "lifted"}."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        lifted = breaker.resume(account_named(name, config))
    emit({"account": name, "lifted": lifted})
