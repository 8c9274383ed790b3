"""The long-running ``layang`` commands, one per process: ``run`` (everything in one), ``serve``
(the HTTP API under gunicorn), ``worker`` (the sender), ``smtpd`` (SMTP submission) and
``inbound`` (the return-path MX, and ``inbound list`` of what it could not read)."""

from __future__ import annotations

import os
import threading

import click

from layang.cli.output import emit
from layang.cli.startup import open_db, prepare, warn_about_ehlo
from layang.cli.uses import API, DELIVERY, GUNICORN, INBOUND_SETTINGS, LOGS, STORE, SUBMISSION, Uses
from layang.clock import iso_ms
from layang.domain import accounts, sending_domains
from layang.models import Account
from layang.serving.preflight import CREATE, EXISTING, HTTP, INBOUND, SMTP, WORKER_METRICS, Needs

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
@click.command()
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
@click.command()
def serve() -> None:
    """HTTP API only, under gunicorn (production)."""
    from layang.serving.processes import serve_gunicorn

    config, listeners = prepare(service=True)
    # The gunicorn master upgrades the schema once, before its workers start.
    serve_gunicorn(config, listeners.take(HTTP))


@Uses(Needs(CREATE, relay=True, listeners=(WORKER_METRICS,)), STORE, DELIVERY, LOGS)
@click.command()
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
@click.command()
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
@click.group(invoke_without_command=True)
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
