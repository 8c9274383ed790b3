"""Configuration: one object built from the environment and passed down.

Only this module reads the process environment. Every setting is optional; the embedded
defaults keep everything under ``LAYANG_DATA_DIR`` so that ``layang run`` works on a bare machine.
Each setting is one field below: its variable, its parser and its default live there and
nowhere else.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

LOG_FORMATS = ("text", "json")


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


def _boolean(raw: str, name: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "yes", "on"):
        return True
    if value in ("false", "0", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, not {raw!r}")


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


def _log_level(raw: str, name: str) -> str:
    return raw.upper()


def _log_format(raw: str, name: str) -> str:
    value = raw.lower()
    if value not in LOG_FORMATS:
        raise ConfigError(f"{name} must be one of {', '.join(LOG_FORMATS)}")
    return value


def _setting(variable: str, parse: Callable[[str, str], Any] = _text, **default: Any) -> Any:
    """A field read from ``variable``; an unset or empty variable leaves the default."""
    return field(metadata={"variable": variable, "parse": parse}, **default)


def _http_workers() -> int:
    # One process per core: each runs LAYANG_HTTP_THREADS request threads, which cover the
    # waiting on the database (and on SQLite share its commits).
    return os.cpu_count() or 1


@dataclass(frozen=True, kw_only=True)
class Config:
    """The whole configuration. ``secret_key`` has no default: ``from_env`` resolves it (from
    ``LAYANG_SECRET_KEY`` or the data dir), so a Config never lacks one.

    An empty ``database_url``, ``relay_url`` or ``public_url`` means the embedded default
    derived from ``data_dir`` or ``http_bind``.
    """

    # _setting returns a dataclasses.field(), not a call shared by every instance.
    data_dir: Path = _setting("LAYANG_DATA_DIR", _path, default=Path("var"))  # noqa: RUF009
    database_url: str = _setting("LAYANG_DATABASE_URL", default="")
    relay_url: str = _setting("LAYANG_RELAY_URL", default="")
    http_bind: str = _setting("LAYANG_HTTP_BIND", _bind, default="127.0.0.1:8000")
    smtp_bind: str = _setting("LAYANG_SMTP_BIND", _bind, default="127.0.0.1:2587")
    public_url: str = _setting("LAYANG_PUBLIC_URL", default="")
    secret_key: str = _setting("LAYANG_SECRET_KEY")
    smtp_tls_cert: str = _setting("LAYANG_SMTP_TLS_CERT", default="")
    smtp_tls_key: str = _setting("LAYANG_SMTP_TLS_KEY", default="")
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
    http_workers: int = _setting("LAYANG_HTTP_WORKERS", _integer, default_factory=_http_workers)
    http_threads: int = _setting("LAYANG_HTTP_THREADS", _integer, default=8)
    worker_poll_seconds: float = _setting("LAYANG_WORKER_POLL_SECONDS", _seconds, default=0.5)
    worker_batch_size: int = _setting("LAYANG_WORKER_BATCH_SIZE", _integer, default=500)
    log_level: str = _setting("LAYANG_LOG_LEVEL", _log_level, default="INFO")
    log_format: str = _setting("LAYANG_LOG_FORMAT", _log_format, default="text")
    worker_metrics_bind: str = _setting("LAYANG_WORKER_METRICS_BIND", _bind, default="")
    dns_resolver: str = _setting("LAYANG_DNS_RESOLVER", _resolvers, default="")
    require_verified_domain: bool = _setting(
        "LAYANG_REQUIRE_VERIFIED_DOMAIN", _boolean, default=False
    )
    inbound_host: str = _setting("LAYANG_INBOUND_HOST", default="")
    rate_limit: RateLimit | None = _setting("LAYANG_RATE_LIMIT", _rate_limit, default=None)  # noqa: RUF009

    def __post_init__(self) -> None:
        if not self.secret_key:
            raise ConfigError("LAYANG_SECRET_KEY is empty; set it or leave it unset")
        derived = {
            "data_dir": Path(self.data_dir),
            "database_url": self.database_url or f"sqlite:///{Path(self.data_dir) / 'layang.db'}",
            "relay_url": self.relay_url or f"capture:{Path(self.data_dir) / 'outbox'}",
            "public_url": (self.public_url or f"http://{self.http_bind}").rstrip("/"),
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)  # frozen: settle the defaults once, here

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, dotenv: bool = True) -> Config:
        """Build the configuration from ``environ`` (default: ``os.environ``) and ``./.env``.

        Real environment variables win over the ``.env`` file. Without ``LAYANG_SECRET_KEY``
        the key is read from the data dir, generated there the first time. Raises
        ``ConfigError`` on a value that cannot be used.
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
            values["secret_key"] = stored_secret_key(data_dir)
        return cls(**values)

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
    def smtp_host_port(self) -> tuple[str, int]:
        return parse_bind(self.smtp_bind, "LAYANG_SMTP_BIND")


def stored_secret_key(data_dir: Path) -> str:
    """The secret key kept in ``data_dir``, generated there (owner-only) the first time.

    Every process on the machine shares it, so tokens signed by one verify in another.
    """
    path = data_dir / "secret_key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"secret_key.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(48))
        # Another process may have won the race; keep whichever landed first.
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)
        tmp.unlink(missing_ok=True)
    return path.read_text().strip()
