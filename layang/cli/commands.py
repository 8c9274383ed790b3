"""The ``layang`` command: its top group, and every sub-command registered on it here, in one
place. Each concern's commands live in a module of their own (``layang.cli.services``,
``accounts``, ``keys``, ``domains``, ``database``, ``backup``, ``queue``, ``retention``,
``users``, ``tlsrpt``, ``send``); what they share is in ``layang.cli.uses`` (the settings each
part reads), ``layang.cli.startup`` (a command's configuration checked, its database opened)
and ``layang.cli.output`` (what it prints)."""

from __future__ import annotations

import click

from layang.cli import (
    accounts,
    backup,
    database,
    domains,
    keys,
    queue,
    retention,
    send,
    services,
    tlsrpt,
    users,
)
from layang.cli.uses import Uses
from layang.serving.preflight import Needs


@click.group()
@click.version_option(package_name="layang")
def main() -> None:
    """Layang: transactional email over HTTP and SMTP.

    Every command checks its configuration before it starts anything; a setting that cannot
    work stops it with one line naming the variable, and exit status 2. `layang COMMAND
    --help` lists the variables a command reads.
    """


for command in (
    services.run,
    services.serve,
    services.worker,
    services.smtpd,
    services.inbound,
    database.db_group,
    accounts.accounts_group,
    keys.keys_group,
    domains.domains_group,
    tlsrpt.tlsrpt_group,
    queue.queue_group,
    retention.retention_group,
    retention.recipients_group,
    users.users_group,
    Uses(Needs(None), ("http_bind",))(send.send),
):
    main.add_command(command)
database.db_group.add_command(backup.db_backup)
accounts.accounts_group.add_command(retention.accounts_set)
