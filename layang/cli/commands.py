"""The ``layang`` command."""

from __future__ import annotations

import json
import os
import sys
import threading
from dataclasses import replace
from typing import Any, NoReturn

import click

from layang.api.errors import describe
from layang.cli.queue import Duration
from layang.cli.send import send as send_command
from layang.clock import iso_ms
from layang.config import Config, ConfigError, describe_settings
from layang.db import database, open_database
from layang.domain import accounts, breaker, sending_domains
from layang.domain.errors import LayangError, NotFound
from layang.logs import configure_logging
from layang.migrations import upgrade, upgrade_once
from layang.migrations.schema import describe as describe_schema
from layang.models import FULL, SCOPES, Account
from layang.serving.preflight import (
    CREATE,
    EXISTING,
    HTTP,
    INBOUND,
    SMTP,
    WORKER_METRICS,
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

# The settings each part of Layang reads, by Config field: a command's --help lists those of
# its parts (tests/test_cli.py checks them against what the command actually reads).
STORE = ("data_dir", "database_url")
LOGS = ("log_level", "log_format", "log_recipients")
# The thresholds: judged when mail is sent, and when outcomes and reports are recorded.
BREAKER_THRESHOLDS = (
    "breaker_min_messages",
    "breaker_bounce_warn",
    "breaker_bounce_pause",
    "breaker_complaint_warn",
    "breaker_complaint_pause",
)
BREAKER = (*BREAKER_THRESHOLDS, "pause_transactional")
API = (
    "http_bind",
    "public_url",
    "secret_key",
    "sandbox_sender",
    "max_message_bytes",
    "tracking_token_days",
    "require_verified_domain",
    "dkim_ed25519",
    "rate_limit",
    "dns_resolver",
    "inbound_host",
    "relay_url",  # its host goes in the SPF record a sending domain should publish
    "webhook_allow_private",
    "bounce_domain",
    *BREAKER,
    "http_body_budget_mb",
    *("retention_days", "content_retention_days"),  # GET /v1/layang/account shows them
    "console_key_signin",
    "console_mail_from",
)
GUNICORN = ("http_workers", "http_threads")
SUBMISSION = (
    "smtp_bind",
    "smtp_tls_cert",
    "smtp_tls_key",
    "smtp_max_connections",
    "smtp_max_connections_per_address",
    "smtp_auth_timeout_seconds",
    "smtp_max_auth_failures",
    "sandbox_sender",
    "max_message_bytes",
    "require_verified_domain",
    "rate_limit",
    *BREAKER,
)
DELIVERY = (
    "relay_url",
    "retry_base_seconds",
    "max_delivery_seconds",
    "lease_seconds",
    "worker_poll_seconds",
    "worker_batch_size",
    "worker_connections",
    "worker_metrics_bind",
    "public_url",
    "tracking_token_days",
    "secret_key",
    "bounce_domain",  # the mailto: of List-Unsubscribe
    "webhook_retry_schedule",
    "webhook_allow_private",
    "mx_port",
    "mx_allow_private",
    "dns_resolver",  # MX look-ups, and where webhook hosts are resolved
    "source_addresses",
    "ehlo_name",
    "throttle_start_seconds",
    "throttle_max_seconds",
    "suspend_after_failures",
    *("tls_cafile", "dane", "tlsrpt", "tlsrpt_from"),  # transport security
    "source_pools",  # the source addresses of each stream
    "mx_setup_seconds",  # the deadlines of a session's set-up and of one transaction
    "mx_transaction_seconds",
    *BREAKER_THRESHOLDS,  # a recorded batch that crosses a threshold raises the Warning
    *("retention_days", "content_retention_days"),  # retention runs every few minutes
    "inbound_retention_days",  # routed inbound mail older is cleared by the worker's chores
)
# Checked by every command before it starts (layang.serving.preflight).
EVERY_COMMAND = ("shaping_file", "secret_key")
INBOUND_SETTINGS = (
    "inbound_bind",
    "bounce_domain",
    "public_url",
    "secret_key",
    "inbound_keep_days",
    "inbound_keep_mb",
    *BREAKER_THRESHOLDS,  # a bounce or complaint report that crosses one raises the Warning
    # Inbound routing: the size accepted, where SPF/DKIM/DMARC are looked up, spamd, what is
    # posted inline, and the STARTTLS certificate.
    *("inbound_max_mb", "dns_resolver", "spamd", "inbound_inline_mb"),
    *("smtp_tls_cert", "smtp_tls_key"),
)
DOMAINS = (
    "dkim_ed25519",
    "dns_resolver",
    "inbound_host",
    "inbound_hostname",  # the MX of inbound routing's domains
    "public_url",
    "relay_url",
    "secret_key",
    "source_addresses",
)


class Uses:
    """What a command needs checked before it starts (``needs``) and the settings it reads
    (``settings``, Config field names, listed in its --help)."""

    def __init__(self, needs: Needs, *parts: tuple[str, ...]) -> None:
        self.needs = needs
        # Only a command that signs or seals something keeps a generated key in the data dir.
        self.keeps_secret = any("secret_key" in part for part in parts)
        self.settings = tuple(
            dict.fromkeys(name for part in (*parts, EVERY_COMMAND) for name in part)
        )

    def __call__(self, command: click.Command) -> click.Command:
        rows = describe_settings(self.settings)
        width = max(len(variable) for variable, _ in rows)
        lines = [f"  {variable.ljust(width)}  {shown}" for variable, shown in rows]
        # "\b" keeps click from rewrapping the table.
        command.epilog = "\b\nEnvironment (and .env), with defaults:\n" + "\n".join(lines)
        command.layang_uses = self  # type: ignore[attr-defined]
        return command


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


def emit(value: Any) -> None:
    click.echo(json.dumps(value))


@click.group()
@click.version_option(package_name="layang")
def main() -> None:
    """Layang: transactional email over HTTP and SMTP.

    Every command checks its configuration before it starts anything; a setting that cannot
    work stops it with one line naming the variable, and exit status 2. `layang COMMAND
    --help` lists the variables a command reads.
    """


EVERYTHING = Uses(
    Needs(CREATE, relay=True, smtp_tls=True, listeners=(HTTP, SMTP, INBOUND, WORKER_METRICS)),
    STORE,
    API,
    SUBMISSION,
    DELIVERY,
    INBOUND_SETTINGS,
    LOGS,
)


@EVERYTHING
@main.command()
def run() -> None:
    """HTTP API, sender worker, SMTP submission and inbound servers in one process
    (development, embedded defaults)."""
    from layang.serving.processes import on_stop_signal, run_all

    config, listeners = prepare(service=True)
    warn_about_ehlo(config)
    open_db(config)
    if not Account.select().exists():
        account = accounts.create_account("default", live=True)
        _, secret = accounts.create_api_key(account, label="created by layang run")
        click.echo(f"Created account 'default' (live) with API key: {secret}")
        click.echo("Keep it: it is shown only this once. To use it in this shell:")
        click.echo(f"  export LAYANG_API_KEY={secret}")
    stop = threading.Event()
    on_stop_signal(stop)

    def print_urls() -> None:
        notice = sending_domains.development_values(config)
        if notice:
            click.echo(notice)
        click.echo(f"API: {config.public_url}/v1")
        click.echo(f"Docs: {config.public_url}/docs")
        click.echo(f"Console: {config.public_url}/console")  # the last line: "ready"

    run_all(config, stop, listeners, on_ready=print_urls)


@Uses(Needs(CREATE, listeners=(HTTP,), database_may_wait=True), STORE, API, GUNICORN, LOGS)
@main.command()
def serve() -> None:
    """HTTP API only, under gunicorn (production)."""
    from layang.serving.processes import serve_gunicorn

    config, listeners = prepare(service=True)
    # The gunicorn master upgrades the schema once, before its workers start.
    serve_gunicorn(config, listeners.take(HTTP))


@Uses(Needs(CREATE, relay=True, listeners=(WORKER_METRICS,)), STORE, DELIVERY, LOGS)
@main.command()
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes, each with its own sessions (default: one per core).",
)
def worker(processes: int | None) -> None:
    """The sender: relays queued mail upstream and records activity.

    Killed at any moment, each process sends again at most 100 emails: the command at most
    100 x processes in all."""
    from layang.serving.processes import (
        fork_workers,
        on_stop_signal,
        run_sender,
        start_worker,
        stop_children,
    )

    config, listeners = prepare(service=True)
    warn_about_ehlo(config)
    index, children = fork_workers(processes or os.cpu_count() or 1)
    metrics = listeners.take(WORKER_METRICS)
    if index and metrics is not None:
        metrics.close()  # the first process serves the metrics
        metrics = None
    open_db(config)
    sender = start_worker(config, metrics)
    stop = threading.Event()
    on_stop_signal(stop)
    try:
        run_sender(config, sender, stop, webhooks=index == 0)
    finally:
        stop_children(children, config.lease_seconds + 15)


@Uses(Needs(CREATE, smtp_tls=True, listeners=(SMTP,)), STORE, SUBMISSION, LOGS)
@main.command()
def smtpd() -> None:
    """The SMTP submission server (STARTTLS, AUTH with an API key)."""
    from layang.serving.processes import on_stop_signal, serve_until, start_smtpd

    config, listeners = prepare(service=True)
    open_db(config)
    server = start_smtpd(config, listeners.take(SMTP))
    stop = threading.Event()
    on_stop_signal(stop)
    serve_until(stop, server)


@Uses(Needs(CREATE, listeners=(INBOUND,)), STORE, INBOUND_SETTINGS, LOGS)
@main.group(invoke_without_command=True)
@click.pass_context
def inbound(context: click.Context) -> None:
    """The inbound SMTP server for bounce and complaint reports (the return-path MX)."""
    if context.invoked_subcommand is not None:
        return
    from layang.serving.processes import on_stop_signal, serve_until, start_inbound

    config, listeners = prepare(service=True)
    open_db(config)
    server = start_inbound(config, listeners.take(INBOUND))
    stop = threading.Event()
    on_stop_signal(stop)
    serve_until(stop, server)


@Uses(Needs(EXISTING), STORE)
@inbound.command("list")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 1000))
def inbound_list(limit: int) -> None:
    """Inbound mail that was not a readable report, newest first."""
    from layang.domain.feedback import list_unrecognised

    config, _ = prepare()
    open_db(config, EXISTING)
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


@Uses(Needs(CREATE), STORE)
@db.command("upgrade")
def db_upgrade() -> None:
    """Create or migrate the schema (idempotent)."""
    config, _ = prepare()
    open_database(config.database_url)
    applied = upgrade()
    emit({"applied": applied})


@Uses(Needs(EXISTING), STORE)
@db.command("schema")
def db_schema() -> None:
    """Print the database's tables, indexes and triggers (never migrates it).

    As its backend's section of docs/schema.sql shows them: the same text once the database is
    upgraded, so a difference shows what the database lacks or holds besides."""
    config, _ = prepare()
    open_database(config.database_url)
    if not database.table_exists("account"):
        fail(str(NoDatabase(config.database_url)))
    database.close()
    click.echo(describe_schema(config.database_url), nl=False)


@main.group("accounts")
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


@main.group("keys")
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


@main.group("domains")
def domains_group() -> None:
    """Sending domains: the DNS records to publish, and DKIM."""


def _dump_domain(state: Any) -> dict[str, Any]:
    from layang.api.domains import DomainSchema

    return DomainSchema().dump(state)


@Uses(Needs(EXISTING), STORE, DOMAINS)
@domains_group.command("add")
@click.argument("name")
@click.argument("domain")
@click.option("--return-path-domain", default=None, help="Default: bounces.DOMAIN.")
def domains_add(name: str, domain: str, return_path_domain: str | None) -> None:
    """Add DOMAIN to account NAME; prints it with the records to publish."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        account = account_named(name, config)
        state = sending_domains.create_domain(account, domain, return_path_domain, config)
    emit(_dump_domain(state))


@Uses(Needs(EXISTING), STORE, DOMAINS)
@domains_group.command("list")
@click.argument("name")
def domains_list(name: str) -> None:
    """List account NAME's sending domains, as of their last check."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        page = sending_domains.list_domains(account_named(name, config), config, limit=500)
    emit([_dump_domain(state) for state in page.items])


@Uses(Needs(EXISTING), STORE, DOMAINS)
@domains_group.command("verify")
@click.argument("name")
@click.argument("domain")
def domains_verify(name: str, domain: str) -> None:
    """Check DOMAIN's records in DNS now; prints the domain with each record's status."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        state = sending_domains.verify_domain(account_named(name, config), domain, config)
    emit(_dump_domain(state))


class domain_errors:
    """Print a domain error as the API's error body (docs/api.md, "Errors") on stderr and exit 1."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, error: Any, tb: Any) -> bool:
        if isinstance(error, LayangError):
            click.echo(json.dumps(describe(error).body()), err=True)
            sys.exit(1)
        return False


TLSRPT = (
    "tlsrpt",
    "tlsrpt_from",
    "bounce_domain",
    "dns_resolver",
    "tls_cafile",
    "mx_allow_private",
)


@main.group("tlsrpt")
def tlsrpt_group() -> None:
    """TLS-RPT (RFC 8460): daily reports to recipient domains about our TLS sessions."""


@Uses(Needs(EXISTING), STORE, TLSRPT)
@tlsrpt_group.command("send")
@click.option("--day", help="The UTC day, YYYY-MM-DD (default: yesterday).")
def tlsrpt_send(day: str | None) -> None:
    """Send the reports of DAY now (each domain's once); prints each domain's outcome."""
    from layang.destinations import tlsrpt

    config, _ = prepare()
    if not config.tlsrpt:
        fail("LAYANG_TLSRPT is false: no TLS-RPT reports are sent; unset it to send them")
    try:
        day = tlsrpt.parse_day(day) if day else tlsrpt.yesterday()
    except ValueError as error:
        fail(f"--day: {error}")
    open_db(config, EXISTING)
    outcomes = tlsrpt.send_reports(config, day)
    emit(
        {
            "day": day,
            "reports": [
                {"domain": o.domain, "status": o.status, "detail": o.detail} for o in outcomes
            ],
        }
    )


main.add_command(Uses(Needs(None), ("http_bind",))(send_command))


# -- the delivery queue (docs/delivery.md, "The queue, visible and steerable") ---------------------


@Uses(Needs(EXISTING), STORE)
@main.group("queue", invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help='Print {"sites": [...]} instead of lines.')
@click.pass_context
def queue_group(context: click.Context, as_json: bool) -> None:
    """The delivery queue: one line per destination site (queued, in flight, sessions open /
    limit, state, last reply)."""
    if context.invoked_subcommand is not None:
        return
    from layang.cli.queue import site_json, site_line
    from layang.domain.queue_view import site_queues

    config, _ = prepare()
    open_db(config, EXISTING)
    rows = site_queues()
    if as_json:
        emit({"sites": [site_json(row) for row in rows]})
    elif not rows:
        click.echo("The queue is empty.")
    for row in [] if as_json else rows:
        click.echo(site_line(row))


@Uses(Needs(EXISTING), STORE)
@queue_group.command("suspend")
@click.argument("site")
@click.option("--for", "duration", type=Duration(), help="e.g. 30m, 2h (default: until resumed)")
@click.option(
    "--force", is_flag=True, help="Suspend SITE even though no mail has gone to or waited for it."
)
def queue_suspend(site: str, duration: float | None, force: bool) -> None:
    """Stop new sessions to SITE (or to the site of a recipient domain) for a while or until
    resumed; prints the site. A site or domain Layang has never seen is refused (a typo would
    suspend nothing) unless --force."""
    from layang.cli.queue import known_site, site_json
    from layang.clock import now_ms
    from layang.destinations import sites
    from layang.domain.queue_view import site_named, site_queues

    config, _ = prepare()
    open_db(config, EXISTING)
    name = site_named(site)
    if not force and not known_site(site, name):
        fail(
            f"No site or recipient domain named {site!r} has been seen in "
            f"{database_location(config.database_url)}: `layang queue` lists the sites. "
            "Check the name, or add --force to suspend it anyway.",
            1,
        )
    until = None if duration is None else now_ms() + int(duration * 1000)
    sites.suspend(name, until, "suspended by the operator")
    emit(next(site_json(row) for row in site_queues() if row.site == name))


@Uses(Needs(EXISTING), STORE)
@queue_group.command("resume")
@click.argument("site")
def queue_resume(site: str) -> None:
    """Let mail flow to SITE (or the site of a recipient domain) again at its full limit;
    prints the site."""
    from layang.cli.queue import site_json
    from layang.destinations import sites
    from layang.domain.queue_view import site_named, site_queues

    config, _ = prepare()
    open_db(config, EXISTING)
    name = site_named(site)
    view = sites.resume(name)
    rows = [site_json(row) for row in site_queues() if row.site == name]
    emit(rows[0] if rows else {"site": name, "state": view.state})


# Registered on import: retention, erasure, ``accounts set`` and ``db backup`` live in their own
# modules.
from layang.cli import backup, retention  # noqa: E402, F401
from layang.cli import users as _users  # noqa: E402, F401 - registers ``layang users``
