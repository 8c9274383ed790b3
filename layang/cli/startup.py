"""How a ``layang`` command starts: its configuration read and checked before anything starts
(``prepare``), its database opened (``open_db``), the account it names found
(``account_named``), and ``fail``, which stops it with one line and an exit status."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import NoReturn

import click

from layang.cli.uses import Uses
from layang.config import Config, ConfigError
from layang.db import database, open_database
from layang.domain import accounts
from layang.domain.errors import NotFound
from layang.logs import configure_logging
from layang.migrations import upgrade_once
from layang.models import Account
from layang.serving.preflight import (
    CREATE,
    EXISTING,
    DatabaseUnreachable,
    Listeners,
    Needs,
    NoDatabase,
    PreflightError,
    check,
    database_location,
    ehlo_warnings,
)

CONFIG_ERROR_STATUS = 2
"""The exit status of a command stopped by a setting that cannot work (as for a usage error):
retrying cannot help (systemd: ``RestartPreventExitStatus=2``)."""
UNAVAILABLE_STATUS = 1
"""The exit status when the database does not answer: it may, so restarting later can help."""


def fail(line: str, status: int = CONFIG_ERROR_STATUS) -> NoReturn:
    """Stop the command: ``line`` on stderr, exit ``status``."""
    click.echo(line, err=True)
    sys.exit(status)


def load_config(*, store_secret: bool = True) -> Config:
    """The configuration; a setting that cannot be parsed stops the command here."""
    try:
        return Config.from_env(store_secret=store_secret)
    except ConfigError as error:
        fail(str(error))


def prepare(*, service: bool = False) -> tuple[Config, Listeners]:
    """The current command's configuration, checked (``layang.serving.preflight``) before anything
    starts, and the sockets of its listeners, bound. Stops the command with one line on stderr
    and exit status 2 at the first setting that cannot work (1 if the database does not answer,
    unless the command waits for it); nothing has been created then.

    ``service``: a long-running command, whose logs go to stdout.
    """
    uses: Uses = click.get_current_context().command.layang_uses  # type: ignore[attr-defined]
    needs = uses.needs
    config = load_config(store_secret=False)
    try:
        listeners = check(config, needs)
    except DatabaseUnreachable as error:
        if not needs.database_may_wait:
            fail(str(error), UNAVAILABLE_STATUS)
        click.echo(f"{error}; starting anyway, answering 503 until it does", err=True)
        listeners = _check(config, replace(needs, database=None))
    except PreflightError as error:
        fail(str(error))
    if uses.keeps_secret:
        config = load_config()  # checked: now the secret key may be stored in the data dir
    if service:
        configure_logging(config)
    return config, listeners


def _check(config: Config, needs: Needs) -> Listeners:
    try:
        return check(config, needs)
    except PreflightError as error:
        fail(str(error))


def warn_about_ehlo(config: Config) -> None:
    """Say on stderr, before anything is sent, that direct to MX would greet receivers with a
    name they refuse (``layang.serving.preflight.ehlo_warnings``)."""
    for line in ehlo_warnings(config):
        click.echo(line, err=True)


def open_db(config: Config, mode: str = CREATE) -> None:
    """Open the database with its schema up to date, upgrading it if needed. With
    ``EXISTING``, a database without Layang's schema stops the command instead."""
    open_database(config.database_url)
    if mode == EXISTING and not database.table_exists("account"):
        fail(str(NoDatabase(config.database_url)))
    upgrade_once(config.database_url)


def account_named(name: str, config: Config) -> Account:
    """The account ``name``; ``NotFound`` says which database was searched and what it holds."""
    try:
        return accounts.get_account(name)
    except NotFound:
        names = [a.name for a in Account.select(Account.name).order_by(Account.name).limit(11)]
        held = ", ".join(names[:10]) + (", …" if len(names) > 10 else "")
        holds = f"its accounts: {held}" if names else "it holds no accounts"
        where = database_location(config.database_url)
        raise NotFound(f"No account named {name!r} in {where} ({holds}).") from None
