"""Configuration: each setting's variable, parser and default written once, and the secret key
resolved once, when the configuration is built."""

from __future__ import annotations

import json
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

# The defaults docs/configuration.md documents.
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
    "log_recipients": "address",
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
    "mx_allow_private": False,
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
    "retention_days": 45,
    "content_retention_days": 7,
    "source_addresses": (),
    "worker_connections": 200,
    "ehlo_name": "",
    "console_key_signin": None,
    "console_mail_from": "",
    "inbound_hostname": "",
    "inbound_inline_mb": 10,
    "inbound_retention_days": 30,
    "inbound_max_mb": 40,
    "spamd": "",
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
        "LAYANG_LOG_RECIPIENTS": "Hash",
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
        "LAYANG_MX_ALLOW_PRIVATE": "true",
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
        "LAYANG_CONSOLE_KEY_SIGNIN": "false",
        "LAYANG_CONSOLE_MAIL_FROM": "console@example.com",
        "LAYANG_SOURCE_ADDRESSES": "192.0.2.1=MTA1.example.com.,192.0.2.2,192.0.2.3,2001:db8::7",
        "LAYANG_WORKER_CONNECTIONS": "50",
        "LAYANG_EHLO_NAME": "mail.example.com",
        "LAYANG_DKIM_ED25519": "true",
        "LAYANG_RETENTION_DAYS": "30",
        "LAYANG_CONTENT_RETENTION_DAYS": "0",
        "LAYANG_INBOUND_HOSTNAME": "mx.inbound.example.com",
        "LAYANG_INBOUND_INLINE_MB": "5",
        "LAYANG_INBOUND_RETENTION_DAYS": "14",
        "LAYANG_INBOUND_MAX_MB": "30",
        "LAYANG_SPAMD": "127.0.0.1:783",
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
        ("LAYANG_LOG_RECIPIENTS", "plain", "must be one of address, hash"),
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


# -- the env file of docs/deploy.md, read as systemd reads it ------------------------------------

DEPLOY = ROOT / "docs" / "deploy.md"


def fenced_blocks(text: str) -> list[str]:
    return re.findall(r"^```\w*\n(.*?)^```$", text, re.S | re.M)


def documented_block(test) -> str:
    blocks = [block for block in fenced_blocks(DEPLOY.read_text()) if test(block)]
    assert len(blocks) == 1, blocks
    return blocks[0]


def documented_env_file() -> str:
    return documented_block(lambda b: "LAYANG_DATA_DIR=" in b and "LAYANG_SECRET_KEY=" in b)


def systemd_environment_file(text: str) -> dict[str, str]:
    """The variables systemd's ``EnvironmentFile=`` sets from ``text``: the state machine of its
    ``parse_env_file_internal`` (src/basic/env-file.c), then its rule that a variable name is
    letters, digits and underscores, not starting with a digit. Comments are whole lines (``#``
    or ``;`` first); after the ``=`` everything is the value, a backslash escapes the next
    character (and joins a line to the next), quotes work as in the shell, leading and trailing
    whitespace outside quotes is dropped."""
    whitespace, newline = " \t\n\r", "\n\r"
    result: dict[str, str] = {}
    state, key, value, key_ws, value_ws = "pre_key", "", "", None, None

    def push() -> None:
        name = key if key_ws is None else key[:key_ws]
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            result[name] = value

    for c in text:
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif c not in whitespace:
                state, key, key_ws = "key", c, None
        elif state == "key":
            if c in newline:
                state, key = "pre_key", ""
            elif c == "=":
                state, value, value_ws = "pre_value", "", None
            else:
                if c not in whitespace:
                    key_ws = None
                elif key_ws is None:
                    key_ws = len(key)
                key += c
        elif state == "pre_value":
            if c in newline:
                push()
                state, key = "pre_key", ""
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            elif c == "\\":
                state = "value_escape"
            elif c not in whitespace:
                state, value = "value", value + c
        elif state == "value":
            if c in newline:
                value = value if value_ws is None else value[:value_ws]
                push()
                state, key = "pre_key", ""
            elif c == "\\":
                state, value_ws = "value_escape", None
            else:
                if c not in whitespace:
                    value_ws = None
                elif value_ws is None:
                    value_ws = len(value)
                value += c
        elif state == "value_escape":
            state = "value"
            if c not in newline:
                value += c
        elif state == "single":
            if c == "'":
                state = "pre_value"
            else:
                value += c
        elif state == "double":
            if c == '"':
                state = "pre_value"
            elif c == "\\":
                state = "double_escape"
            else:
                value += c
        elif state == "double_escape":
            state = "double"
            if c in '"\\`$':
                value += c
            elif c != "\n":
                value += "\\" + c
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c in newline:
                state = "pre_key"
        elif state == "comment_escape":
            state = "pre_key" if c in newline else "comment"
    if state in ("pre_value", "value", "value_escape", "single", "double", "double_escape"):
        if state == "value" and value_ws is not None:
            value = value[:value_ws]
        push()
    return result


def test_the_systemd_reader_follows_systemds_rules():
    parsed = systemd_environment_file(
        '# a comment\n ; another\nA=1 # kept\nB = \' two \'  \nC="x\\"y\\$\\n"\nD=a\\\nb\n'
        "not an assignment\n9X=dropped\nE=\n  F=last"
    )
    assert parsed == {
        "A": "1 # kept",
        "B": " two ",
        "C": 'x"y$\\n',
        "D": "ab",
        "E": "",
        "F": "last",
    }


def shell_environment_file(path: Path) -> dict[str, str]:
    """The LAYANG_ variables ``sh`` exports from the file, as ``set -a; . FILE`` does."""
    listed = subprocess.run(
        ["sh", "-c", 'set -a; . "$1"; env -0', "sh", str(path)],
        env={"PATH": os.environ["PATH"]},
        capture_output=True,
        check=True,
    ).stdout.decode()
    pairs = (item.partition("=") for item in listed.split("\0") if item)
    return {name: value for name, _, value in pairs if name.startswith("LAYANG_")}


def test_the_documented_env_file_means_the_same_to_systemd_and_the_shell(tmp_path):
    text = documented_env_file()
    by_systemd = systemd_environment_file(text)
    assert by_systemd, text
    for name, value in by_systemd.items():
        # Every documented value is one word: a space means a comment or a note was kept.
        assert "#" not in value and not re.search(r"\s", value), (name, value)
    assert by_systemd["LAYANG_INBOUND_HOST"] == "mx.example.com"
    assert by_systemd["LAYANG_REQUIRE_VERIFIED_DOMAIN"] == "true"
    (tmp_path / "layang.env").write_text(text)
    assert shell_environment_file(tmp_path / "layang.env") == by_systemd


def documented_units() -> list[tuple[list[str], dict[str, str]]]:
    """(ExecStart arguments after the program, Environment= settings) of each documented unit,
    with the instance ``%i`` as 1."""
    units = []
    for block in fenced_blocks(DEPLOY.read_text()):
        if "[Service]" not in block or "EnvironmentFile=/etc/layang/layang.env" not in block:
            continue
        block = block.replace("%i", "1")
        start = re.search(r"^ExecStart=(\S+)(.*)$", block, re.M)
        assert start[1] == "/opt/layang/bin/layang", start[0]
        settings = dict(
            line.removeprefix("Environment=").split("=", 1)
            for line in block.splitlines()
            if line.startswith("Environment=")
        )
        units.append((start[2].split(), settings))
    return units


def filled_in(text: str, **values: str) -> str:
    """The documented file with the operator's own ``values`` in place of the examples'."""
    for name, value in values.items():
        text, count = re.subn(rf"^{name}=.*$", f"{name}={value}", text, flags=re.M)
        if not count:
            text += f"{name}={value}\n"
    return text


def wait_until_listening(process: subprocess.Popen, port: int, timeout: float = 60) -> bool:
    import socket
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            time.sleep(0.2)
    return False


def test_every_documented_command_starts_with_the_documented_env_file(tmp_path):
    """docs/deploy.md, "PostgreSQL" and "systemd units": the env file as written, with this
    machine's database, data directory, certificate, ports and the key made as the docs say."""
    from tests.delivery.test_crash import free_port

    documented = documented_env_file()
    key_command = documented_block(lambda b: b.startswith('python3 -c "import secrets')).strip()
    key = subprocess.run(key_command, shell=True, capture_output=True, text=True, check=True)
    certfile, keyfile, _ = LocalCA(tmp_path).issue("mail.example.com")
    ports = {name: free_port() for name in ("HTTP", "SMTP", "INBOUND", "WORKER_METRICS")}
    ours = {
        "LAYANG_DATABASE_URL": f"sqlite:///{tmp_path / 'layang.db'}",
        "LAYANG_DATA_DIR": str(tmp_path / "data"),
        "LAYANG_SMTP_TLS_CERT": str(certfile),
        "LAYANG_SMTP_TLS_KEY": str(keyfile),
        **{f"LAYANG_{name}_BIND": f"127.0.0.1:{port}" for name, port in ports.items()},
        "LAYANG_HTTP_WORKERS": "1",
    }
    env_file = tmp_path / "layang.env"
    admin = tmp_path / "layang-admin"
    admin.write_text(
        documented_block(lambda b: b.startswith("#!/bin/sh") and "layang.env" in b)
        .replace("/etc/layang/layang.env", str(env_file))
        .replace("/opt/layang/bin/layang", f"{sys.executable} -m layang")
    )
    base = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    base["PYTHONPATH"] = str(ROOT)

    def by_hand(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["sh", str(admin), *args],
            cwd=tmp_path,
            env=base,
            capture_output=True,
            text=True,
            timeout=60,
        )

    # As written, the placeholder stops every command, naming the variable.
    env_file.write_text(filled_in(documented, **ours))
    refused = by_hand("db", "upgrade")
    assert refused.returncode == 2 and refused.stderr.startswith("LAYANG_SECRET_KEY: "), refused

    env_file.write_text(filled_in(documented, **ours, LAYANG_SECRET_KEY=key.stdout.strip()))
    for args in (["db", "upgrade"], ["accounts", "create", "shop", "--live"]):
        done = by_hand(*args)
        assert done.returncode == 0, (args, done.stderr)
    added = by_hand("domains", "add", "shop", "example.com")
    assert added.returncode == 0, added.stderr
    records = {record["purpose"]: record for record in json.loads(added.stdout)["records"]}
    assert records["return-path"]["value"] == "10 mx.example.com"

    environment = systemd_environment_file(env_file.read_text())
    units = documented_units()
    assert sorted(args[0] for args, _ in units) == ["inbound", "serve", "smtpd", "worker"]
    for args, settings in units:
        listens = {"serve": "HTTP", "smtpd": "SMTP", "inbound": "INBOUND"}.get(args[0])
        # The unit's Environment= and then the file (systemd: the file wins), our ports last.
        env = (
            base
            | settings
            | environment
            | {f"LAYANG_{n}_BIND": ours[f"LAYANG_{n}_BIND"] for n in ports}
        )
        process = subprocess.Popen(
            [sys.executable, "-m", "layang", *args],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            up = wait_until_listening(process, ports[listens or "WORKER_METRICS"])
        finally:
            process.terminate()
            _, errors = process.communicate(timeout=120)
        assert up, (args, process.returncode, errors)


def test_the_direct_to_mx_recipe_delivers_as_written(tmp_path):
    """docs/deploy.md, "Trying it on one machine": the two shells' commands, run as written but
    for the ports (free ones here) and the pip install (done by the test set-up)."""
    import signal
    import time

    from tests.delivery.test_crash import free_port

    text = DEPLOY.read_text()
    section = text[text.index("**Trying it on one machine.**") :]
    first, second = re.findall(r"```sh\n(.*?)```", section, re.S)[:2]
    dns, mx, http = free_port(), free_port(), free_port()
    ports = {"5300": str(dns), "2500": str(mx)}
    for documented, ours in ports.items():
        first = re.sub(rf"\b{documented}\b", ours, first)
    first = first.replace(".venv/bin/pip install dnslib", ":")
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parents[1])
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env |= {
        "PYTHONUNBUFFERED": "1",
        "LAYANG_HTTP_BIND": f"127.0.0.1:{http}",
        "LAYANG_SMTP_BIND": f"127.0.0.1:{free_port()}",
        "LAYANG_INBOUND_BIND": f"127.0.0.1:{free_port()}",
    }
    log = tmp_path / "first-shell.log"
    with log.open("w") as out:
        shell = subprocess.Popen(
            ["bash", "-c", first],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while "Console: " not in log.read_text() and time.monotonic() < deadline:
            assert shell.poll() is None, log.read_text()
            time.sleep(0.2)
        key = re.search(r"export LAYANG_API_KEY=(\S+)", log.read_text())[1]
        second = second.replace("lyg_…", key).replace(
            "http://127.0.0.1:8000", f"http://127.0.0.1:{http}"
        )
        sent = subprocess.run(["bash", "-c", second], capture_output=True, text=True, timeout=30)
        assert sent.stdout.startswith('{"transmissionId"'), sent
        activity = "\n".join([second.splitlines()[0], second.splitlines()[-1]])
        while time.monotonic() < deadline:
            listed = subprocess.run(["bash", "-c", activity], capture_output=True, text=True)
            item = json.loads(listed.stdout)["items"][0]
            if item["status"] == "Delivery":
                break
            time.sleep(0.3)
        assert item["status"] == "Delivery", (item, log.read_text()[-3000:])
        delivery = next(e["detail"] for e in item["events"] if e["status"] == "Delivery")
        assert (item["status"], delivery["reply"], delivery["host"]) == (
            "Delivery",
            "250 OK",
            "mx.example.test",
        ), item
        assert "Subject: Hello" in log.read_text() and "Hi Ana!" in log.read_text()
    finally:
        os.killpg(shell.pid, signal.SIGTERM)
        shell.wait(timeout=60)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LAYANG_RETENTION_DAYS", "0"),
        ("LAYANG_RETENTION_DAYS", "forever"),
        ("LAYANG_CONTENT_RETENTION_DAYS", "-1"),
        ("LAYANG_CONTENT_RETENTION_DAYS", "4000"),
    ],
)
def test_retention_settings_out_of_range_name_their_variable(empty_dir, variable, value):
    with pytest.raises(ConfigError, match=variable):
        Config.from_env({variable: value, "LAYANG_SECRET_KEY": "k"}, dotenv=False)
