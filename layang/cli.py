"""The ``layang`` command."""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

import click

from layang.api.errors import describe
from layang.cli_send import send as send_command
from layang.clock import iso_ms
from layang.config import Config, ConfigError
from layang.db import open_database
from layang.domain import accounts, sending_domains
from layang.domain.errors import LayangError
from layang.logs import configure_logging
from layang.migrations import upgrade, upgrade_once
from layang.models import FULL, SCOPES, Account


def load_config() -> Config:
    """The configuration, secret key included; a setting that cannot be used stops here."""
    try:
        return Config.from_env()
    except ConfigError as error:
        raise click.ClickException(str(error)) from None


def load_service_config() -> Config:
    """Configuration for the long-running commands, whose logs go to stdout."""
    config = load_config()
    configure_logging(config)
    return config


def open_db(config: Config) -> None:
    """Open the database with its schema up to date, upgrading it if needed."""
    open_database(config.database_url)
    upgrade_once(config.database_url)


def emit(value: Any) -> None:
    click.echo(json.dumps(value))


@click.group()
@click.version_option(package_name="layang")
def main() -> None:
    """Layang: transactional email over HTTP and SMTP."""


@main.command()
def run() -> None:
    """HTTP API, sender worker, SMTP submission and inbound servers in one process
    (development, embedded defaults)."""
    from layang.serving import on_stop_signal, run_all

    config = load_service_config()
    open_db(config)
    if not Account.select().exists():
        account = accounts.create_account("default", live=True)
        _, secret = accounts.create_api_key(account, label="created by layang run")
        click.echo(f"Created account 'default' (live) with API key: {secret}")
        click.echo("Keep it: it is shown only this once.")
    stop = threading.Event()
    on_stop_signal(stop)

    def print_urls() -> None:
        click.echo(f"API: {config.public_url}/v1")
        click.echo(f"Docs: {config.public_url}/docs")
        click.echo(f"Console: {config.public_url}/console")

    run_all(config, stop, on_ready=print_urls)


@main.command()
def serve() -> None:
    """HTTP API only, under gunicorn."""
    from layang.serving import serve_gunicorn

    config = load_service_config()
    # The gunicorn master upgrades the schema once, before its workers start.
    serve_gunicorn(config)


@main.command()
def worker() -> None:
    """The sender: relays queued mail upstream and records activity."""
    from layang.serving import on_stop_signal, run_worker

    config = load_service_config()
    open_db(config)
    stop = threading.Event()
    on_stop_signal(stop)
    run_worker(config, stop)


@main.command()
def smtpd() -> None:
    """The SMTP submission server (STARTTLS, AUTH with an API key)."""
    from layang.serving import on_stop_signal, run_smtpd

    config = load_service_config()
    open_db(config)
    stop = threading.Event()
    on_stop_signal(stop)
    run_smtpd(config, stop)


@main.group(invoke_without_command=True)
@click.pass_context
def inbound(context: click.Context) -> None:
    """The inbound SMTP server for bounce and complaint reports (the return-path MX)."""
    if context.invoked_subcommand is not None:
        return
    from layang.serving import on_stop_signal, run_inbound

    config = load_service_config()
    open_db(config)
    stop = threading.Event()
    on_stop_signal(stop)
    run_inbound(config, stop)


@inbound.command("list")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
def inbound_list(limit: int) -> None:
    """Inbound mail that was not a readable report, newest first."""
    from layang.domain.feedback import list_unrecognised

    open_db(load_config())
    emit(
        [
            {
                "id": entry.id,
                "receivedAt": iso_ms(entry.received_at),
                "mailFrom": entry.mail_from,
                "rcptTo": list(entry.rcpt_to),
                "size": entry.size,
                "reason": entry.reason,
                "subject": _subject(entry.raw),
            }
            for entry in list_unrecognised(limit)
        ]
    )


def _subject(raw: bytes) -> str:
    from email.parser import BytesHeaderParser
    from email.policy import compat32

    head = raw.split(b"\r\n\r\n", 1)[0][:65536]
    try:
        value = BytesHeaderParser(policy=compat32).parsebytes(head).get("Subject", "")
        return " ".join(str(value).split())[:200]
    except Exception:  # a listing must show even what does not parse
        return ""


@main.group()
def db() -> None:
    """Database schema."""


@db.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema (idempotent)."""
    config = load_config()
    open_database(config.database_url)
    applied = upgrade()
    emit({"applied": applied})


@main.group("accounts")
def accounts_group() -> None:
    """Accounts."""


@accounts_group.command("create")
@click.argument("name")
@click.option("--live", is_flag=True, help="A live account (default: sandbox).")
def accounts_create(name: str, live: bool) -> None:
    """Create an account; prints {"id", "name", "mode"}."""
    open_db(load_config())
    with domain_errors():
        account = accounts.create_account(name, live=live)
    emit({"id": account.id, "name": account.name, "mode": account.mode})


@main.group("keys")
def keys_group() -> None:
    """API keys."""


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
    open_db(load_config())
    with domain_errors():
        key, secret = accounts.create_api_key(accounts.get_account(name), label, scope)
    emit({"id": key.id, "key": secret, "account": name, "scope": key.scope})


@keys_group.command("list")
@click.argument("name")
def keys_list(name: str) -> None:
    """List the keys of account NAME (never their secrets)."""
    open_db(load_config())
    with domain_errors():
        keys = accounts.list_api_keys(accounts.get_account(name))
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


@keys_group.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Revoke a key at once."""
    open_db(load_config())
    with domain_errors():
        key = accounts.revoke_api_key(key_id)
    emit({"id": key.id, "revokedAt": iso_ms(key.revoked_at)})


@main.group("domains")
def domains_group() -> None:
    """Sending domains: the DNS records to publish, and DKIM."""


def _dump_domain(state: Any) -> dict[str, Any]:
    from layang.api.domains import DomainSchema

    return DomainSchema().dump(state)


@domains_group.command("add")
@click.argument("name")
@click.argument("domain")
@click.option("--return-path-domain", default=None, help="Default: bounces.DOMAIN.")
def domains_add(name: str, domain: str, return_path_domain: str | None) -> None:
    """Add DOMAIN to account NAME; prints it with the records to publish."""
    config = load_config()
    open_db(config)
    with domain_errors():
        account = accounts.get_account(name)
        state = sending_domains.create_domain(account, domain, return_path_domain, config)
    emit(_dump_domain(state))


@domains_group.command("list")
@click.argument("name")
def domains_list(name: str) -> None:
    """List account NAME's sending domains, as of their last check."""
    config = load_config()
    open_db(config)
    with domain_errors():
        page = sending_domains.list_domains(accounts.get_account(name), config, limit=500)
    emit([_dump_domain(state) for state in page.items])


@domains_group.command("verify")
@click.argument("name")
@click.argument("domain")
def domains_verify(name: str, domain: str) -> None:
    """Check DOMAIN's records in DNS now; prints the domain with each record's status."""
    config = load_config()
    open_db(config)
    with domain_errors():
        state = sending_domains.verify_domain(accounts.get_account(name), domain, config)
    emit(_dump_domain(state))


class domain_errors:
    """Print a domain error as the contract's error body on stderr and exit 1."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, tb: Any) -> bool:
        if isinstance(error, LayangError):
            click.echo(json.dumps(describe(error).body()), err=True)
            sys.exit(1)
        return False


main.add_command(send_command)
