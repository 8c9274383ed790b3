"""What each ``layang`` command uses: the settings each part of Layang reads (by ``Config``
field name, listed in a command's --help) and, through ``Uses``, what is checked before the
command starts (``layang.serving.preflight.Needs``)."""

from __future__ import annotations

import click

from layang.config import describe_settings
from layang.serving.preflight import Needs

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
