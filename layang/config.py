"""Configuration: one object built from the environment and passed down.

Only this module reads the process environment. Every setting is optional; the embedded
defaults keep everything under ``LAYANG_DATA_DIR`` so that ``layang run`` works on a bare machine.
Each setting is one field below: its variable, its parser and its default live there and
nowhere else.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import secrets
import socket
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import idna
from dotenv import dotenv_values

LOG_FORMATS = ("text", "json")
MAX_RETENTION_DAYS = 3650
LOG_RECIPIENTS = ("address", "hash")


class ConfigError(ValueError):
    """A configuration value is present but unusable."""


def parse_bind(bind: str, name: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` allowed) into its parts."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{name} must look like host:port, not {bind!r}")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - an explicit ":port" means all


def _text(raw: str, name: str) -> str:
    return raw


def _path(raw: str, name: str) -> Path:
    return Path(raw)


def _bind(raw: str, name: str) -> str:
    parse_bind(raw, name)
    return raw


def _seconds(raw: str, name: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, not {raw!r}")
    return value


def _integer(raw: str, name: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, not {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, not {raw!r}")
    return value


def _days(raw: str, name: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number of days, not {raw!r}") from None
    if not 0 <= value <= MAX_RETENTION_DAYS:
        raise ConfigError(f"{name} must be between 0 and {MAX_RETENTION_DAYS} days, not {raw!r}")
    return value


def _boolean(raw: str, name: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, not {raw!r}")


def _schedule(raw: str, name: str) -> tuple[float, ...]:
    try:
        delays = tuple(float(part) for part in raw.split(","))
    except ValueError:
        raise ConfigError(
            f"{name} must be delays in seconds separated by commas (e.g. 5,300,1800), not {raw!r}"
        ) from None
    if any(delay <= 0 for delay in delays):
        raise ConfigError(f"{name} must hold positive delays, not {raw!r}")
    return delays


def parse_resolvers(raw: str, name: str) -> tuple[tuple[str, int], ...]:
    """``host:port[,host:port…]`` as (host, port) pairs; a bare host means port 53."""
    servers = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        if item.rpartition(":")[2].isdigit() and (item.count(":") == 1 or item.startswith("[")):
            host, port = parse_bind(item, name)
        else:
            host, port = item.strip("[]"), 53
        servers.append((host, port))
    if not servers:
        raise ConfigError(f"{name} must list resolvers as host:port[,host:port]")
    return tuple(servers)


def _resolvers(raw: str, name: str) -> str:
    parse_resolvers(raw, name)
    return raw


@dataclass(frozen=True)
class SourceAddress:
    """An address outbound SMTP sessions bind to, and the name they give in EHLO there (its
    PTR name; empty: ``LAYANG_EHLO_NAME``)."""

    address: str
    ehlo_name: str = ""


def parse_sources(raw: str, name: str) -> tuple[SourceAddress, ...]:
    """``ip[=ehlo.name][,…]`` as source addresses; raises ``ConfigError`` naming the item."""
    sources = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        address, _, ehlo = item.partition("=")
        try:
            parsed = ipaddress.ip_address(address.strip().strip("[]"))
        except ValueError:
            raise ConfigError(
                f"{name} must list addresses as ip[=ehlo.name][,…]; {address.strip()!r} is not "
                "an IP address"
            ) from None
        ehlo = ehlo.strip().rstrip(".").lower()
        if ehlo and (any(c.isspace() for c in ehlo) or "." not in ehlo):
            raise ConfigError(f"{name}: {ehlo!r} is not a host name (the address's PTR name)")
        ehlo = _a_labels(ehlo, name)
        sources.append(SourceAddress(str(parsed), ehlo))
    if not sources:
        raise ConfigError(f"{name} must list addresses as ip[=ehlo.name][,…]")
    return tuple(sources)


def _host_name(raw: str, name: str) -> str:
    value = raw.strip().rstrip(".").lower()
    if not value or any(c.isspace() for c in value) or "@" in value:
        raise ConfigError(f"{name} must be a host name (this host's PTR name), not {raw!r}")
    return _a_labels(value, name)


def _a_labels(value: str, name: str) -> str:
    """A host name as EHLO sends it: IDNA 2008 A-labels (UTS #46 mapping), as
    ``layang.mail.idn.to_ascii`` does for every other domain."""
    if value.isascii():
        return value
    try:
        return idna.encode(value, uts46=True, transitional=False).decode("ascii")
    except idna.IDNAError as error:
        raise ConfigError(
            f"{name}: {value!r} is not a valid host name (IDNA 2008: {error})"
        ) from None


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` messages per account in each window of ``seconds``."""

    count: int
    seconds: int

    def __str__(self) -> str:
        return f"{self.count}/{_PERIOD_NAMES[self.seconds]}"


_PERIODS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "hour": 3600}
_PERIOD_NAMES = {1: "s", 60: "min", 3600: "h"}


def _rate_limit(raw: str, name: str) -> RateLimit:
    count, _, period = raw.strip().partition("/")
    seconds = _PERIODS.get(period.strip().lower())
    if not count.strip().isdigit() or int(count) <= 0 or seconds is None:
        raise ConfigError(f"{name} must look like 50/s, 1000/min or 20000/h, not {raw!r}")
    return RateLimit(int(count), seconds)


def _domain(raw: str, name: str) -> str:
    value = raw.strip().rstrip(".").lower()
    if "@" in value or not value or any(c.isspace() for c in value):
        raise ConfigError(f"{name} must be a domain name, not {raw!r}")
    return _a_labels(value, name)


def _source_addresses(raw: str, name: str) -> tuple[tuple[str, str], ...]:
    """``ip[=ehlo.name][,…]`` → ((ip, ehlo name or ""), …)."""
    sources = parse_sources(raw, name)
    if len({source.address for source in sources}) != len(sources):
        raise ConfigError(f"{name} names an address twice")
    return tuple((source.address, source.ehlo_name) for source in sources)


def _cafile(raw: str, name: str) -> str:
    # Loaded now, so a wrong path stops the command at start rather than at the first TLS
    # session.
    try:
        ssl.create_default_context(cafile=raw)
    except (OSError, ssl.SSLError) as error:
        raise ConfigError(
            f"{name}: cannot load CA certificates from {raw!r} ({error}); give a PEM file"
        ) from None
    return raw


def _address(raw: str, name: str) -> str:
    value = raw.strip()
    local, at, domain = value.rpartition("@")
    if not at or not local or not domain or any(c.isspace() for c in value):
        raise ConfigError(f"{name} must be an email address, not {raw!r}")
    return value


def _fraction(raw: str, name: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a fraction such as 0.05, not {raw!r}") from None
    if not 0 < value <= 1:
        raise ConfigError(f"{name} must be above 0 and at most 1 (0.05 is 5 %), not {raw!r}")
    return value


SourcePools = tuple[tuple[str, tuple[str, ...]], ...]
POOL_STREAMS = ("transactional", "broadcast")


def parse_source_pools(raw: str, name: str) -> SourcePools:
    """``stream:ip,ip;stream:ip`` as (stream, addresses) pairs, each stream once."""
    pools: dict[str, tuple[str, ...]] = {}
    for part in raw.split(";"):
        if not part.strip():
            continue
        stream, colon, listed = part.partition(":")
        stream = stream.strip().lower()
        if not colon or stream not in POOL_STREAMS:
            raise ConfigError(
                f"{name} must look like transactional:ip,ip;broadcast:ip, not {part.strip()!r}"
            )
        if stream in pools:
            raise ConfigError(f"{name} names the {stream} stream twice")
        addresses = []
        for item in listed.split(","):
            try:
                addresses.append(str(ipaddress.ip_address(item.strip())))
            except ValueError:
                raise ConfigError(
                    f"{name} must list IP addresses: "
                    f"{item.strip()!r} in the {stream} pool is not one"
                ) from None
        pools[stream] = tuple(addresses)
    if not pools:
        raise ConfigError(f"{name} must look like transactional:ip,ip;broadcast:ip")
    return tuple(pools.items())


def check_pools_within(pools: SourcePools, source_addresses: str) -> None:
    """Raise ``ConfigError`` unless every pooled address is one of ``LAYANG_SOURCE_ADDRESSES``
    (when that is set)."""
    if not source_addresses.strip():
        return
    try:
        allowed = {source.address for source in parse_sources(source_addresses, "")}
    except ConfigError:
        return  # LAYANG_SOURCE_ADDRESSES itself is wrong: its own check says so
    for stream, addresses in pools:
        for address in addresses:
            if address not in allowed:
                raise ConfigError(
                    f"LAYANG_SOURCE_POOLS: {address} ({stream}) is not one of "
                    "LAYANG_SOURCE_ADDRESSES; add it there or remove it from the pool"
                )


def _public_url(raw: str, name: str) -> str:
    # Without a scheme, "mail.example.com" would be read as a path: links in mail would break.
    value = raw.strip()
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        example = value.split("://")[-1] or "mail.example.com"
        raise ConfigError(f"{name} must be a URL with its scheme, such as https://{example}")
    return value


def _log_level(raw: str, name: str) -> str:
    return raw.upper()


def _log_format(raw: str, name: str) -> str:
    value = raw.lower()
    if value not in LOG_FORMATS:
        raise ConfigError(f"{name} must be one of {', '.join(LOG_FORMATS)}")
    return value


def _log_recipients(raw: str, name: str) -> str:
    value = raw.strip().lower()
    if value not in LOG_RECIPIENTS:
        raise ConfigError(f"{name} must be one of {', '.join(LOG_RECIPIENTS)}")
    return value


def _setting(
    variable: str, parse: Callable[[str, str], Any] = _text, *, shown: str = "", **default: Any
) -> Any:
    """A field read from ``variable``; an unset or empty variable leaves the default.

    ``shown`` is the default as the help tells it, for a default derived at run time.
    """
    return field(metadata={"variable": variable, "parse": parse, "shown": shown}, **default)


def _http_workers() -> int:
    # One process per core: each runs LAYANG_HTTP_THREADS request threads, which cover the
    # waiting on the database (and on SQLite share its commits).
    return os.cpu_count() or 1


@dataclass(frozen=True, kw_only=True)
class Config:
    """The whole configuration. ``secret_key`` has no default: ``from_env`` resolves it (from
    ``LAYANG_SECRET_KEY`` or the data dir), so a Config never lacks one.

    An empty ``database_url``, ``relay_url``, ``public_url`` or ``bounce_domain`` means the
    embedded default derived from ``data_dir``, ``http_bind`` or ``public_url``.
    """

    # _setting returns a dataclasses.field(), not a call shared by every instance.
    data_dir: Path = _setting("LAYANG_DATA_DIR", _path, shown="./var", default=Path("var"))  # noqa: RUF009
    database_url: str = _setting(
        "LAYANG_DATABASE_URL", shown="sqlite:///$LAYANG_DATA_DIR/layang.db", default=""
    )
    relay_url: str = _setting(
        "LAYANG_RELAY_URL", shown="capture:$LAYANG_DATA_DIR/outbox", default=""
    )
    http_bind: str = _setting("LAYANG_HTTP_BIND", _bind, default="127.0.0.1:8000")
    smtp_bind: str = _setting("LAYANG_SMTP_BIND", _bind, default="127.0.0.1:2587")
    public_url: str = _setting(
        "LAYANG_PUBLIC_URL", _public_url, shown="http://$LAYANG_HTTP_BIND", default=""
    )
    secret_key: str = _setting(
        "LAYANG_SECRET_KEY", shown="generated into $LAYANG_DATA_DIR/secret_key"
    )
    smtp_tls_cert: str = _setting(
        "LAYANG_SMTP_TLS_CERT", shown="self-signed, made in $LAYANG_DATA_DIR", default=""
    )
    smtp_tls_key: str = _setting(
        "LAYANG_SMTP_TLS_KEY", shown="self-signed, made in $LAYANG_DATA_DIR", default=""
    )
    sandbox_sender: str = _setting("LAYANG_SANDBOX_SENDER", default="sandbox@sandbox.layang.test")
    retry_base_seconds: float = _setting("LAYANG_RETRY_BASE_SECONDS", _seconds, default=60.0)
    max_delivery_seconds: float = _setting(
        "LAYANG_MAX_DELIVERY_SECONDS", _seconds, default=259200.0
    )
    lease_seconds: float = _setting("LAYANG_LEASE_SECONDS", _seconds, default=60.0)
    max_message_bytes: int = _setting("LAYANG_MAX_MESSAGE_BYTES", _integer, default=26214400)
    tracking_token_days: int = _setting("LAYANG_TRACKING_TOKEN_DAYS", _integer, default=90)
    smtp_max_connections: int = _setting("LAYANG_SMTP_MAX_CONNECTIONS", _integer, default=500)
    smtp_max_connections_per_address: int = _setting(
        "LAYANG_SMTP_MAX_CONNECTIONS_PER_ADDRESS", _integer, default=50
    )
    smtp_auth_timeout_seconds: float = _setting(
        "LAYANG_SMTP_AUTH_TIMEOUT_SECONDS", _seconds, default=30.0
    )
    smtp_max_auth_failures: int = _setting("LAYANG_SMTP_MAX_AUTH_FAILURES", _integer, default=10)
    http_workers: int = _setting(
        "LAYANG_HTTP_WORKERS", _integer, shown="number of cores", default_factory=_http_workers
    )
    http_threads: int = _setting("LAYANG_HTTP_THREADS", _integer, default=8)
    worker_poll_seconds: float = _setting("LAYANG_WORKER_POLL_SECONDS", _seconds, default=0.5)
    worker_batch_size: int = _setting("LAYANG_WORKER_BATCH_SIZE", _integer, default=500)
    worker_connections: int = _setting("LAYANG_WORKER_CONNECTIONS", _integer, default=200)
    log_level: str = _setting("LAYANG_LOG_LEVEL", _log_level, default="INFO")
    log_format: str = _setting("LAYANG_LOG_FORMAT", _log_format, default="text")
    log_recipients: str = _setting("LAYANG_LOG_RECIPIENTS", _log_recipients, default="address")
    worker_metrics_bind: str = _setting(
        "LAYANG_WORKER_METRICS_BIND", _bind, shown="unset (off)", default=""
    )
    dns_resolver: str = _setting(
        "LAYANG_DNS_RESOLVER", _resolvers, shown="the system resolver", default=""
    )
    require_verified_domain: bool = _setting(
        "LAYANG_REQUIRE_VERIFIED_DOMAIN", _boolean, default=False
    )
    dkim_ed25519: bool = _setting("LAYANG_DKIM_ED25519", _boolean, default=False)
    inbound_host: str = _setting(
        "LAYANG_INBOUND_HOST", shown="the host of LAYANG_PUBLIC_URL", default=""
    )
    rate_limit: RateLimit | None = _setting(  # noqa: RUF009
        "LAYANG_RATE_LIMIT", _rate_limit, shown="unset (no limit)", default=None
    )
    inbound_bind: str = _setting("LAYANG_INBOUND_BIND", _bind, default="127.0.0.1:2525")
    bounce_domain: str = _setting(
        "LAYANG_BOUNCE_DOMAIN", _domain, shown="bounces.<host of LAYANG_PUBLIC_URL>", default=""
    )
    webhook_retry_schedule: tuple[float, ...] = _setting(
        "LAYANG_WEBHOOK_RETRY_SCHEDULE",
        _schedule,
        default=(5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0),
    )
    webhook_allow_private: bool = _setting("LAYANG_WEBHOOK_ALLOW_PRIVATE", _boolean, default=False)
    # Direct to MX (docs/delivery.md, "Direct to MX"): shaping rules, the MX port (25; tests use
    # another), and the adaptive throttle's pause: it starts at throttle_start_seconds, doubles
    # while a site keeps saying "slow down" (or keeps refusing connections), and stops growing
    # at the cap.
    shaping_file: str = _setting("LAYANG_SHAPING_FILE", shown="unset (built-in rules)", default="")
    mx_port: int = _setting("LAYANG_MX_PORT", _integer, default=25)
    # Recipient domains name the hosts Layang connects to (MX hosts, MTA-STS policy hosts,
    # TLS-RPT endpoints): only public addresses unless private networks are allowed (tests,
    # private deployments); link-local IPv4 and cloud metadata addresses never.
    mx_allow_private: bool = _setting("LAYANG_MX_ALLOW_PRIVATE", _boolean, default=False)
    source_addresses: tuple[tuple[str, str], ...] = _setting(
        "LAYANG_SOURCE_ADDRESSES",
        _source_addresses,
        shown="unset (the system's choice)",
        default=(),
    )
    ehlo_name: str = _setting("LAYANG_EHLO_NAME", _host_name, shown="the host's FQDN", default="")
    throttle_start_seconds: float = _setting("LAYANG_THROTTLE_START_SECONDS", _seconds, default=5.0)
    throttle_max_seconds: float = _setting("LAYANG_THROTTLE_MAX_SECONDS", _seconds, default=300.0)
    suspend_after_failures: int = _setting("LAYANG_SUSPEND_AFTER_FAILURES", _integer, default=3)
    # Deadlines of one session to an MX host: setting it up (connect, greeting, EHLO, STARTTLS,
    # every host tried), and each transaction on it, so that a slow server holds a session
    # for a bounded time.
    mx_setup_seconds: float = _setting("LAYANG_MX_SETUP_SECONDS", _seconds, default=60.0)
    mx_transaction_seconds: float = _setting(
        "LAYANG_MX_TRANSACTION_SECONDS", _seconds, default=300.0
    )
    # Transport security (section 14).
    tls_cafile: str = _setting(
        "LAYANG_TLS_CAFILE", _cafile, shown="unset (the system CAs only)", default=""
    )
    dane: bool = _setting("LAYANG_DANE", _boolean, default=False)
    tlsrpt: bool = _setting("LAYANG_TLSRPT", _boolean, default=True)
    tlsrpt_from: str = _setting(
        "LAYANG_TLSRPT_FROM", _address, shown="tls-reports@<LAYANG_BOUNCE_DOMAIN>", default=""
    )
    # Teams (section 21).
    console_key_signin: bool | None = _setting(
        "LAYANG_CONSOLE_KEY_SIGNIN",
        _boolean,
        shown="true until an account has its first user, then false for that account",
        default=None,
    )
    console_mail_from: str = _setting(
        "LAYANG_CONSOLE_MAIL_FROM",
        _address,
        shown="no-reply@<host of LAYANG_PUBLIC_URL>",
        default="",
    )
    # Deliverability guardrails (docs/api.md, "Streams and the circuit breaker").
    source_pools: SourcePools = _setting(  # noqa: RUF009
        "LAYANG_SOURCE_POOLS", parse_source_pools, shown="unset (every stream: any)", default=()
    )
    breaker_min_messages: int = _setting("LAYANG_BREAKER_MIN_MESSAGES", _integer, default=500)
    breaker_bounce_warn: float = _setting("LAYANG_BREAKER_BOUNCE_WARN", _fraction, default=0.05)
    breaker_bounce_pause: float = _setting("LAYANG_BREAKER_BOUNCE_PAUSE", _fraction, default=0.10)
    breaker_complaint_warn: float = _setting(
        "LAYANG_BREAKER_COMPLAINT_WARN", _fraction, default=0.001
    )
    breaker_complaint_pause: float = _setting(
        "LAYANG_BREAKER_COMPLAINT_PAUSE", _fraction, default=0.005
    )
    pause_transactional: bool = _setting("LAYANG_PAUSE_TRANSACTIONAL", _boolean, default=False)
    inbound_keep_days: int = _setting("LAYANG_INBOUND_KEEP_DAYS", _integer, default=7)
    inbound_keep_mb: int = _setting("LAYANG_INBOUND_KEEP_MB", _integer, default=100)
    inbound_hostname: str = _setting(
        "LAYANG_INBOUND_HOSTNAME", _text, shown="LAYANG_INBOUND_HOST", default=""
    )
    inbound_inline_mb: int = _setting("LAYANG_INBOUND_INLINE_MB", _integer, default=10)
    inbound_retention_days: int = _setting("LAYANG_INBOUND_RETENTION_DAYS", _integer, default=30)
    inbound_max_mb: int = _setting("LAYANG_INBOUND_MAX_MB", _integer, default=40)
    spamd: str = _setting("LAYANG_SPAMD", _bind, shown="unset (no spam score)", default="")
    http_body_budget_mb: int = _setting("LAYANG_HTTP_BODY_BUDGET_MB", _integer, default=256)
    # Retention (docs/deploy.md, "What is kept, and for how long"): activity records, events and
    # webhook history are kept retention_days; a message's content content_retention_days after
    # its last recipient is final. Accounts may override both.
    retention_days: int = _setting("LAYANG_RETENTION_DAYS", _integer, default=45)
    content_retention_days: int = _setting("LAYANG_CONTENT_RETENTION_DAYS", _days, default=7)

    def __post_init__(self) -> None:
        if not self.secret_key:
            raise ConfigError("LAYANG_SECRET_KEY is empty; set it or leave it unset")
        in_data_dir = _data_dir_defaults(Path(self.data_dir))
        derived = {
            "data_dir": Path(self.data_dir),
            "database_url": self.database_url or in_data_dir["database_url"],
            "relay_url": self.relay_url or in_data_dir["relay_url"],
            "public_url": (self.public_url or f"http://{self.http_bind}").rstrip("/"),
        }
        public_host = urlsplit(derived["public_url"]).hostname or "localhost"
        derived["bounce_domain"] = self.bounce_domain or f"bounces.{public_host.rstrip('.')}"
        for name, value in derived.items():
            object.__setattr__(self, name, value)  # frozen: settle the defaults once, here

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        dotenv: bool = True,
        store_secret: bool = True,
    ) -> Config:
        """Build the configuration from ``environ`` (default: ``os.environ``) and ``./.env``.

        Real environment variables win over the ``.env`` file. Without ``LAYANG_SECRET_KEY``
        the key is read from the data dir, generated there the first time; with
        ``store_secret=False`` (for commands that sign nothing) a missing one is not stored
        and the key is one of this process only. Raises ``ConfigError`` on a value that
        cannot be used.
        """
        env: dict[str, str] = {}
        if dotenv and Path(".env").is_file():
            env.update({k: v for k, v in dotenv_values(".env").items() if v is not None})
        env.update(os.environ if environ is None else environ)

        values: dict[str, Any] = {}
        for setting in fields(cls):
            variable = setting.metadata["variable"]
            raw = env.get(variable, "")
            if raw != "":
                values[setting.name] = setting.metadata["parse"](raw, variable)
        if "secret_key" not in values:
            data_dir = values.get("data_dir", cls.__dataclass_fields__["data_dir"].default)
            stored = Path(data_dir) / "secret_key"
            if store_secret or stored.exists():
                try:
                    values["secret_key"] = stored_secret_key(data_dir)
                except OSError as error:
                    raise ConfigError(
                        f"LAYANG_DATA_DIR: cannot keep the secret key in {stored.absolute()}: "
                        f"{error.strerror}; choose a writable directory or set LAYANG_SECRET_KEY"
                    ) from None
            else:
                values["secret_key"] = secrets.token_urlsafe(48)
        if "source_pools" in values:
            check_pools_within(values["source_pools"], env.get("LAYANG_SOURCE_ADDRESSES", ""))
        return cls(**values)

    def follows_data_dir(self, name: str) -> bool:
        """Whether the setting ``name`` (``database_url``, ``relay_url``) is the default
        derived from the data dir, so that ``LAYANG_DATA_DIR`` is what decides it."""
        return getattr(self, name) == _data_dir_defaults(self.data_dir)[name]

    @property
    def max_request_body_bytes(self) -> int:
        """The largest HTTP request body accepted: a message of ``max_message_bytes`` grows by a
        third in Base64, plus room for the JSON around it."""
        return self.max_message_bytes * 4 // 3 + 1024 * 1024

    @property
    def http_host_port(self) -> tuple[str, int]:
        return parse_bind(self.http_bind, "LAYANG_HTTP_BIND")

    @property
    def dns_resolvers(self) -> tuple[tuple[str, int], ...]:
        """The resolvers of ``LAYANG_DNS_RESOLVER``; empty means the system's."""
        if not self.dns_resolver:
            return ()
        return parse_resolvers(self.dns_resolver, "LAYANG_DNS_RESOLVER")

    @property
    def sources(self) -> tuple[SourceAddress, ...]:
        """The source addresses of ``LAYANG_SOURCE_ADDRESSES``, each with its EHLO name
        (``LAYANG_EHLO_NAME`` where none is given); empty: the system picks the address."""
        default = self.helo_name if self.source_addresses else ""
        return tuple(
            SourceAddress(address, ehlo or default) for address, ehlo in self.source_addresses
        )

    @property
    def helo_name(self) -> str:
        """The EHLO name of sessions without a source address of their own:
        ``LAYANG_EHLO_NAME``, else this host's FQDN (looked up once per process)."""
        return self.ehlo_name or _fqdn()

    @property
    def inbound_host_port(self) -> tuple[str, int]:
        return parse_bind(self.inbound_bind, "LAYANG_INBOUND_BIND")

    @property
    def smtp_host_port(self) -> tuple[str, int]:
        return parse_bind(self.smtp_bind, "LAYANG_SMTP_BIND")

    def source_pool(self, stream: str) -> tuple[str, ...]:
        """The source addresses ``LAYANG_SOURCE_POOLS`` gives ``stream``; empty means any."""
        return dict(self.source_pools).get(stream, ())


@functools.lru_cache(maxsize=1)
def _fqdn() -> str:
    # getfqdn() can take seconds where DNS is broken: once per process.
    return socket.getfqdn().rstrip(".").lower() or "localhost"


def _data_dir_defaults(data_dir: Path) -> dict[str, str]:
    return {
        "database_url": f"sqlite:///{data_dir / 'layang.db'}",
        "relay_url": f"capture:{data_dir / 'outbox'}",
    }


def stored_secret_key(data_dir: Path) -> str:
    """The secret key kept in ``data_dir``, generated there (owner-only) the first time.

    Every process on the machine shares it, so tokens signed by one verify in another.
    """
    path = data_dir / "secret_key"
    if not path.exists():
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f"secret_key.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(48))
        # Another process may have won the race; keep whichever landed first.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()


def describe_settings(names: Iterable[str]) -> list[tuple[str, str]]:
    """(variable, default as a person reads it) of the ``Config`` fields ``names``, in the
    order of the fields."""
    wanted = set(names)
    rows = []
    for setting in fields(Config):
        if setting.name not in wanted:
            continue
        shown = setting.metadata["shown"]
        if not shown:
            default = setting.default
            if isinstance(default, float) and default.is_integer():
                default = int(default)
            shown = str(default).lower() if isinstance(default, bool) else str(default)
        rows.append((setting.metadata["variable"], shown))
    unknown = wanted - {setting.name for setting in fields(Config)}
    if unknown:
        raise ValueError(f"not settings: {sorted(unknown)}")
    return rows
