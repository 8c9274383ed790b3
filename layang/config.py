"""Configuration: one object built from the environment and passed down.

Only this module reads the process environment. Every setting is optional; the embedded
defaults keep everything under ``LAYANG_DATA_DIR`` so that ``layang run`` works on a bare machine.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from dotenv import dotenv_values

LOG_FORMATS = ("text", "json")


class ConfigError(ValueError):
    """A configuration value is present but unusable."""


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, not {raw!r}")
    return value


def _integer(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "")
    if raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, not {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive, not {raw!r}")
    return value


def parse_bind(bind: str, name: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` allowed) into its parts."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"{name} must look like host:port, not {bind!r}")
    return host.strip("[]") or "0.0.0.0", int(port)  # noqa: S104 - an explicit ":port" means all


@dataclass(frozen=True)
class Config:
    data_dir: Path = Path("var")
    database_url: str = ""
    relay_url: str = ""
    http_bind: str = "127.0.0.1:8000"
    smtp_bind: str = "127.0.0.1:2587"
    public_url: str = ""
    secret_key: str = ""
    smtp_tls_cert: str = ""
    smtp_tls_key: str = ""
    sandbox_sender: str = "sandbox@sandbox.layang.test"
    retry_base_seconds: float = 60.0
    max_delivery_seconds: float = 259200.0
    lease_seconds: float = 60.0
    max_message_bytes: int = 26214400
    http_workers: int = 3
    worker_poll_seconds: float = 0.5
    worker_batch_size: int = 50
    log_level: str = "INFO"
    log_format: str = "text"
    worker_metrics_bind: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, dotenv: bool = True) -> Config:
        """Build the configuration from ``environ`` (default: ``os.environ``) and ``./.env``.

        Real environment variables win over the ``.env`` file. Raises ``ConfigError`` on a value
        that cannot be used.
        """
        env: dict[str, str] = {}
        if dotenv and Path(".env").is_file():
            env.update({k: v for k, v in dotenv_values(".env").items() if v is not None})
        env.update(os.environ if environ is None else environ)

        data_dir = Path(env.get("LAYANG_DATA_DIR") or "var")
        http_bind = env.get("LAYANG_HTTP_BIND") or "127.0.0.1:8000"
        smtp_bind = env.get("LAYANG_SMTP_BIND") or "127.0.0.1:2587"
        parse_bind(http_bind, "LAYANG_HTTP_BIND")
        parse_bind(smtp_bind, "LAYANG_SMTP_BIND")
        worker_metrics_bind = env.get("LAYANG_WORKER_METRICS_BIND", "")
        if worker_metrics_bind:
            parse_bind(worker_metrics_bind, "LAYANG_WORKER_METRICS_BIND")
        log_format = (env.get("LAYANG_LOG_FORMAT") or "text").lower()
        if log_format not in LOG_FORMATS:
            raise ConfigError(f"LAYANG_LOG_FORMAT must be one of {', '.join(LOG_FORMATS)}")
        config = cls(
            data_dir=data_dir,
            database_url=env.get("LAYANG_DATABASE_URL") or f"sqlite:///{data_dir / 'layang.db'}",
            relay_url=env.get("LAYANG_RELAY_URL") or f"capture:{data_dir / 'outbox'}",
            http_bind=http_bind,
            smtp_bind=smtp_bind,
            public_url=(env.get("LAYANG_PUBLIC_URL") or f"http://{http_bind}").rstrip("/"),
            secret_key=env.get("LAYANG_SECRET_KEY", ""),
            smtp_tls_cert=env.get("LAYANG_SMTP_TLS_CERT", ""),
            smtp_tls_key=env.get("LAYANG_SMTP_TLS_KEY", ""),
            sandbox_sender=env.get("LAYANG_SANDBOX_SENDER") or "sandbox@sandbox.layang.test",
            retry_base_seconds=_seconds(env, "LAYANG_RETRY_BASE_SECONDS", 60.0),
            max_delivery_seconds=_seconds(env, "LAYANG_MAX_DELIVERY_SECONDS", 259200.0),
            lease_seconds=_seconds(env, "LAYANG_LEASE_SECONDS", 60.0),
            max_message_bytes=_integer(env, "LAYANG_MAX_MESSAGE_BYTES", 26214400),
            http_workers=_integer(env, "LAYANG_HTTP_WORKERS", 2 * (os.cpu_count() or 1) + 1),
            worker_poll_seconds=_seconds(env, "LAYANG_WORKER_POLL_SECONDS", 0.5),
            worker_batch_size=_integer(env, "LAYANG_WORKER_BATCH_SIZE", 50),
            log_level=(env.get("LAYANG_LOG_LEVEL") or "INFO").upper(),
            log_format=log_format,
            worker_metrics_bind=worker_metrics_bind,
        )
        return config

    def with_secret_key(self) -> Config:
        """Return this config with a secret key, generating one into the data dir if needed."""
        if self.secret_key:
            return self
        path = self.data_dir / "secret_key"
        if not path.exists():
            self.data_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(secrets.token_urlsafe(48))
            # Another process may have won the race; keep whichever landed first.
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
            tmp.unlink(missing_ok=True)
        return replace(self, secret_key=path.read_text().strip())

    @property
    def http_host_port(self) -> tuple[str, int]:
        return parse_bind(self.http_bind, "LAYANG_HTTP_BIND")

    @property
    def smtp_host_port(self) -> tuple[str, int]:
        return parse_bind(self.smtp_bind, "LAYANG_SMTP_BIND")
