"""Configuration: each setting's variable, parser and default written once, and the secret key
resolved once, when the configuration is built."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

from layang.config import Config, ConfigError
from layang.db import database
from layang.domain import accounts
from layang.serving.app import create_app
from tests.support.tls_pki import LocalCA

ROOT = Path(__file__).resolve().parents[1]

# The defaults README.md and CONTRACT.md document.
DOCUMENTED = {
    "data_dir": Path("var"),
    "database_url": "sqlite:///var/layang.db",
    "relay_url": "capture:var/outbox",
    "http_bind": "127.0.0.1:8000",
    "smtp_bind": "127.0.0.1:2587",
    "public_url": "http://127.0.0.1:8000",
    "smtp_tls_cert": "",
    "smtp_tls_key": "",
    "sandbox_sender": "sandbox@sandbox.layang.test",
    "retry_base_seconds": 60,
    "max_delivery_seconds": 259200,
    "lease_seconds": 60,
    "max_message_bytes": 26214400,
    "tracking_token_days": 90,
    "smtp_max_connections": 500,
    "smtp_max_connections_per_address": 50,
    "smtp_auth_timeout_seconds": 30.0,
    "smtp_max_auth_failures": 10,
    "http_workers": os.cpu_count() or 1,
    "http_threads": 8,
    "worker_batch_size": 500,
    "worker_poll_seconds": 0.5,
    "log_level": "INFO",
    "log_format": "text",
    "worker_metrics_bind": "",
    "dns_resolver": "",
    "require_verified_domain": False,
    "dkim_ed25519": False,
    "inbound_host": "",
    "inbound_bind": "127.0.0.1:2525",
    "bounce_domain": "bounces.127.0.0.1",
    "rate_limit": None,
    "webhook_retry_schedule": (5, 300, 1800, 7200, 18000, 36000, 36000),
    "webhook_allow_private": False,
    "shaping_file": "",
    "mx_port": 25,
    "throttle_start_seconds": 5,
    "throttle_max_seconds": 300,
    "suspend_after_failures": 3,
    "mx_setup_seconds": 60.0,
    "mx_transaction_seconds": 300.0,
    "tls_cafile": "",
    "dane": False,
    "tlsrpt": True,
    "tlsrpt_from": "",
    "source_pools": (),
    "breaker_min_messages": 500,
    "breaker_bounce_warn": 0.05,
    "breaker_bounce_pause": 0.10,
    "breaker_complaint_warn": 0.001,
    "breaker_complaint_pause": 0.005,
    "pause_transactional": False,
    "inbound_keep_days": 7,
    "inbound_keep_mb": 100,
    "http_body_budget_mb": 256,
    "source_addresses": (),
    "worker_connections": 200,
    "ehlo_name": "",
}


@pytest.fixture
def empty_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory without a .env file or a data dir."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_defaults_are_the_documented_ones_and_from_env_agrees(empty_dir):
    built = Config.from_env({}, dotenv=False)
    constructed = Config(secret_key=built.secret_key)
    assert built == constructed
    for name, value in DOCUMENTED.items():
        assert getattr(built, name) == value, name
    assert set(DOCUMENTED) | {"secret_key"} == {setting.name for setting in fields(Config)}


def test_every_setting_reads_its_documented_variable(empty_dir):
    readme = (ROOT / "docs" / "configuration.md").read_text()
    documented = set(re.findall(r"^\| `(LAYANG_[A-Z0-9_]+)`", readme, re.M))
    documented |= set(re.findall(r"^\| `LAYANG_[A-Z0-9_]+`, `(LAYANG_[A-Z0-9_]+)`", readme, re.M))
    variables = {setting.metadata["variable"] for setting in fields(Config)}
    assert variables == documented

    environ = {
        "LAYANG_DATA_DIR": str(empty_dir / "data"),
        "LAYANG_DATABASE_URL": "postgresql://db.internal/layang",
        "LAYANG_RELAY_URL": "smtp://relay.internal:25",
        "LAYANG_HTTP_BIND": "0.0.0.0:8080",
        "LAYANG_SMTP_BIND": "0.0.0.0:587",
        "LAYANG_PUBLIC_URL": "https://mail.example.com/",
        "LAYANG_SECRET_KEY": "from-the-environment",
        "LAYANG_SMTP_TLS_CERT": "/etc/cert.pem",
        "LAYANG_SMTP_TLS_KEY": "/etc/key.pem",
        "LAYANG_SANDBOX_SENDER": "trial@example.com",
        "LAYANG_RETRY_BASE_SECONDS": "5",
        "LAYANG_MAX_DELIVERY_SECONDS": "3600",
        "LAYANG_LEASE_SECONDS": "30",
        "LAYANG_MAX_MESSAGE_BYTES": "1000",
        "LAYANG_TRACKING_TOKEN_DAYS": "30",
        "LAYANG_SMTP_MAX_CONNECTIONS": "200",
        "LAYANG_SMTP_MAX_CONNECTIONS_PER_ADDRESS": "20",
        "LAYANG_SMTP_AUTH_TIMEOUT_SECONDS": "15",
        "LAYANG_SMTP_MAX_AUTH_FAILURES": "5",
        "LAYANG_HTTP_WORKERS": "7",
        "LAYANG_HTTP_THREADS": "3",
        "LAYANG_WORKER_POLL_SECONDS": "2",
        "LAYANG_WORKER_BATCH_SIZE": "10",
        "LAYANG_LOG_LEVEL": "debug",
        "LAYANG_LOG_FORMAT": "JSON",
        "LAYANG_WORKER_METRICS_BIND": "127.0.0.1:9101",
        "LAYANG_DNS_RESOLVER": "127.0.0.1:5353,[::1]:53",
        "LAYANG_REQUIRE_VERIFIED_DOMAIN": "true",
        "LAYANG_INBOUND_HOST": "mx.example.com",
        "LAYANG_INBOUND_BIND": "0.0.0.0:25",
        "LAYANG_BOUNCE_DOMAIN": "Bounces.Example.com.",
        "LAYANG_RATE_LIMIT": "1000/min",
        "LAYANG_WEBHOOK_RETRY_SCHEDULE": "1,1,2",
        "LAYANG_WEBHOOK_ALLOW_PRIVATE": "true",
        "LAYANG_SHAPING_FILE": "/etc/layang/shaping.toml",
        "LAYANG_MX_PORT": "2525",
        "LAYANG_THROTTLE_START_SECONDS": "1",
        "LAYANG_THROTTLE_MAX_SECONDS": "60",
        "LAYANG_SUSPEND_AFTER_FAILURES": "5",
        "LAYANG_MX_SETUP_SECONDS": "20",
        "LAYANG_MX_TRANSACTION_SECONDS": "90",
        "LAYANG_TLS_CAFILE": str(LocalCA(empty_dir / "ca").cafile),
        "LAYANG_DANE": "true",
        "LAYANG_TLSRPT": "false",
        "LAYANG_TLSRPT_FROM": "tls-reports@example.com",
        "LAYANG_SOURCE_POOLS": "transactional:192.0.2.1,192.0.2.2;broadcast:192.0.2.3",
        "LAYANG_BREAKER_MIN_MESSAGES": "100",
        "LAYANG_BREAKER_BOUNCE_WARN": "0.04",
        "LAYANG_BREAKER_BOUNCE_PAUSE": "0.08",
        "LAYANG_BREAKER_COMPLAINT_WARN": "0.002",
        "LAYANG_BREAKER_COMPLAINT_PAUSE": "0.004",
        "LAYANG_PAUSE_TRANSACTIONAL": "true",
        "LAYANG_INBOUND_KEEP_DAYS": "3",
        "LAYANG_INBOUND_KEEP_MB": "10",
        "LAYANG_HTTP_BODY_BUDGET_MB": "64",
        "LAYANG_SOURCE_ADDRESSES": "192.0.2.1=MTA1.example.com.,192.0.2.2,192.0.2.3,2001:db8::7",
        "LAYANG_WORKER_CONNECTIONS": "50",
        "LAYANG_EHLO_NAME": "mail.example.com",
        "LAYANG_DKIM_ED25519": "true",
    }
    config = Config.from_env(environ, dotenv=False)
    defaults = Config(secret_key="x")
    for setting in fields(Config):
        assert getattr(config, setting.name) != getattr(defaults, setting.name), setting.name
    assert config.public_url == "https://mail.example.com"
    assert config.bounce_domain == "bounces.example.com"
    assert (config.log_level, config.log_format) == ("DEBUG", "json")
    assert config.dns_resolvers == (("127.0.0.1", 5353), ("::1", 53))
    assert (config.rate_limit.count, config.rate_limit.seconds) == (1000, 60)
    assert config.webhook_retry_schedule == (1, 1, 2)
    assert config.source_pool("transactional") == ("192.0.2.1", "192.0.2.2")
    assert config.source_pool("broadcast") == ("192.0.2.3",)
    assert not (empty_dir / "data").exists()  # a key from the environment writes nothing


def test_derived_defaults_follow_the_data_dir_and_the_bind(empty_dir):
    environ = {"LAYANG_DATA_DIR": "/srv/layang", "LAYANG_HTTP_BIND": "10.0.0.5:80"}
    config = Config.from_env(environ | {"LAYANG_SECRET_KEY": "k"}, dotenv=False)
    assert config.database_url == "sqlite:////srv/layang/layang.db"
    assert config.relay_url == "capture:/srv/layang/outbox"
    assert config.public_url == "http://10.0.0.5:80"


def test_the_env_file_is_read_and_the_environment_wins(empty_dir):
    (empty_dir / ".env").write_text("LAYANG_HTTP_BIND=127.0.0.1:9000\nLAYANG_LEASE_SECONDS=9\n")
    config = Config.from_env({"LAYANG_LEASE_SECONDS": "11", "LAYANG_SECRET_KEY": "k"})
    assert (config.http_bind, config.lease_seconds) == ("127.0.0.1:9000", 11)


def test_the_secret_key_is_generated_once_into_the_data_dir_and_reused(empty_dir):
    environ = {"LAYANG_DATA_DIR": str(empty_dir / "data")}
    first = Config.from_env(environ, dotenv=False)
    stored = empty_dir / "data" / "secret_key"
    assert stored.read_text() == first.secret_key and len(first.secret_key) >= 64
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert Config.from_env(environ, dotenv=False).secret_key == first.secret_key
    assert sorted(p.name for p in stored.parent.iterdir()) == ["secret_key"]
    # The variable, when set, wins over the stored key.
    overridden = Config.from_env(environ | {"LAYANG_SECRET_KEY": "shared"}, dotenv=False)
    assert overridden.secret_key == "shared"


def test_a_config_always_has_a_secret_key():
    with pytest.raises(TypeError, match="secret_key"):
        Config()
    with pytest.raises(ConfigError, match="LAYANG_SECRET_KEY"):
        Config(secret_key="")


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("LAYANG_HTTP_BIND", "8000", "must look like host:port"),
        ("LAYANG_SMTP_BIND", "host:", "must look like host:port"),
        ("LAYANG_WORKER_METRICS_BIND", "nowhere", "must look like host:port"),
        ("LAYANG_LEASE_SECONDS", "soon", "must be a number of seconds"),
        ("LAYANG_RETRY_BASE_SECONDS", "-1", "must be positive"),
        ("LAYANG_HTTP_WORKERS", "2.5", "must be a whole number"),
        ("LAYANG_LOG_FORMAT", "xml", "must be one of text, json"),
        ("LAYANG_REQUIRE_VERIFIED_DOMAIN", "maybe", "must be true or false"),
        ("LAYANG_DNS_RESOLVER", ",", "must list resolvers"),
        ("LAYANG_SOURCE_POOLS", "bulk:192.0.2.1", "must look like transactional:ip,ip;broadcast"),
        (
            "LAYANG_SOURCE_POOLS",
            "broadcast:192.0.2",
            "must list IP addresses: '192.0.2' in the broadcast",
        ),
        ("LAYANG_BREAKER_BOUNCE_PAUSE", "10%", "must be a fraction such as 0.05"),
        ("LAYANG_BREAKER_COMPLAINT_WARN", "2", "must be above 0 and at most 1"),
        (
            "LAYANG_PUBLIC_URL",
            "mail.example.com",
            "must be a URL with its scheme, such as https://mail.example.com",
        ),
        ("LAYANG_PUBLIC_URL", "ftp://mail.example.com", "must be a URL with its scheme"),
    ],
)
def test_an_unusable_value_names_its_variable(empty_dir, variable, value, message):
    with pytest.raises(ConfigError, match=f"^{variable} {message}"):
        Config.from_env({variable: value, "LAYANG_SECRET_KEY": "k"}, dotenv=False)


@pytest.mark.parametrize(
    ("raw", "count", "seconds"), [("50/s", 50, 1), ("1000/min", 1000, 60), ("20000/h", 20000, 3600)]
)
def test_rate_limits_read_per_second_minute_or_hour(raw, count, seconds):
    limit = Config.from_env({"LAYANG_RATE_LIMIT": raw, "LAYANG_SECRET_KEY": "k"}, dotenv=False)
    assert (limit.rate_limit.count, limit.rate_limit.seconds) == (count, seconds)
    assert str(limit.rate_limit) == raw


@pytest.mark.parametrize("raw", ["50", "0/s", "-1/min", "10/day", "x/h"])
def test_a_malformed_rate_limit_names_the_variable(raw):
    with pytest.raises(ConfigError, match="LAYANG_RATE_LIMIT"):
        Config.from_env({"LAYANG_RATE_LIMIT": raw, "LAYANG_SECRET_KEY": "k"}, dotenv=False)


def test_the_data_directory_and_the_database_are_readable_by_their_owner_only(empty_dir):
    data_dir = empty_dir / "data"
    config = Config.from_env({"LAYANG_DATA_DIR": str(data_dir)}, dotenv=False)
    previous = os.umask(0o022)  # the usual umask, under which files come out world-readable
    try:
        create_app(config)
        accounts.create_account("acme", live=True)  # a write, so the WAL exists too
    finally:
        os.umask(previous)
    try:
        assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
        for name in ("layang.db", "layang.db-wal", "secret_key"):
            assert stat.S_IMODE((data_dir / name).stat().st_mode) == 0o600, name
    finally:
        database.close()


def test_source_pools_must_use_the_source_addresses_when_those_are_set(empty_dir):
    pools = "transactional:192.0.2.1;broadcast:192.0.2.9"
    environ = {"LAYANG_SOURCE_POOLS": pools, "LAYANG_SECRET_KEY": "k"}
    assert Config.from_env(environ, dotenv=False).source_pool("broadcast") == ("192.0.2.9",)
    with pytest.raises(ConfigError, match=r"^LAYANG_SOURCE_POOLS: 192\.0\.2\.9 \(broadcast\)"):
        Config.from_env(environ | {"LAYANG_SOURCE_ADDRESSES": "192.0.2.1,192.0.2.2"}, dotenv=False)


def test_a_bad_source_pool_stops_a_command_with_one_line(empty_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env |= {
        "PYTHONPATH": str(ROOT),
        "LAYANG_DATA_DIR": str(empty_dir / "data"),
        "LAYANG_SOURCE_POOLS": "broadcast:192.0.2.9",
        "LAYANG_SOURCE_ADDRESSES": "192.0.2.1",
    }
    result = subprocess.run(
        [sys.executable, "-m", "layang", "db", "upgrade"],
        cwd=empty_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("LAYANG_SOURCE_POOLS: 192.0.2.9 (broadcast) is not one of")
