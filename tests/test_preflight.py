"""Every command checks its configuration before it starts anything: a wrong setting stops the
real command at once, exit status 2, one line on stderr naming the variable, no traceback, and
nothing left listening or half started."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from layang.config import Config
from layang.serving.preflight import HTTP, Needs, check
from tests.delivery.test_crash import free_port
from tests.postgres.server import ADMIN_URL, with_database

ROOT = Path(__file__).resolve().parents[1]


def layang(args, tmp_path, *, python_prelude="", timeout=60, **settings):
    """Run ``layang ARGS`` from an empty directory with only ``settings`` configured."""
    workdir = tmp_path / "cwd"
    workdir.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(LAYANG_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(ROOT))
    env.update({k: str(v) for k, v in settings.items()})
    code = f"{python_prelude}\nfrom layang.cli.commands import main\nmain()"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def port_is_free(port):
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def binds(**ports):
    """LAYANG_*_BIND settings on free loopback ports."""
    return {f"LAYANG_{name.upper()}_BIND": f"127.0.0.1:{port}" for name, port in ports.items()}


def assert_stopped_by(result, variable, *fragments, free=(), status=2):
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{variable}"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""  # nothing started: no URLs, no key, no log line
    for port in free:
        assert port_is_free(port), f"port {port} is still taken"


@pytest.fixture
def occupied():
    """A loopback port something else listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    ("relay_url", "fragment"),
    [
        ("smtpx://relay.example", "use smtp://, smtps:// or capture:DIR"),
        ("smtp://relay.example:99999", "bad relay URL"),
        ("smtp://relay.example?tls=required&cafile=/nonexistent/ca.pem", "cannot load"),
        ("smtp://relay.example?tsl=off", "unknown relay URL option"),
    ],
)
def test_a_wrong_relay_url_stops_run_before_anything_listens(tmp_path, relay_url, fragment):
    http, smtp = free_port(), free_port()
    result = layang(["run"], tmp_path, LAYANG_RELAY_URL=relay_url, **binds(http=http, smtp=smtp))
    assert_stopped_by(result, "LAYANG_RELAY_URL", fragment, free=(http, smtp))
    assert not (tmp_path / "data").exists()


def test_a_wrong_relay_url_stops_the_worker(tmp_path):
    result = layang(["worker"], tmp_path, LAYANG_RELAY_URL="smtp://")
    assert_stopped_by(result, "LAYANG_RELAY_URL", "names no host")


def test_a_capture_relay_directory_that_cannot_be_made_stops_the_worker(tmp_path):
    (tmp_path / "a-file").write_text("")
    result = layang(["worker"], tmp_path, LAYANG_RELAY_URL=f"capture:{tmp_path / 'a-file' / 'out'}")
    assert_stopped_by(result, "LAYANG_RELAY_URL", "is a file")


@pytest.mark.parametrize("command", [["run"], ["worker"], ["keys", "list", "default"]])
def test_an_unsupported_database_says_which_are_supported(tmp_path, command):
    result = layang(
        command, tmp_path, LAYANG_DATABASE_URL="mysql://u:secret@db/layang", **binds(http=0)
    )
    assert_stopped_by(result, "LAYANG_DATABASE_URL", "mysql:// is not supported", "sqlite://")
    assert "postgresql://" in result.stderr and "secret" not in result.stderr


def test_postgresql_without_its_driver_says_how_to_install_it(tmp_path):
    # The driver made unimportable, as on an install without the postgresql extra.
    result = layang(
        ["serve"],
        tmp_path,
        python_prelude="import sys; sys.modules['psycopg2'] = None",
        LAYANG_DATABASE_URL="postgresql://layang@127.0.0.1/layang",
        **binds(http=free_port()),
    )
    assert_stopped_by(result, "LAYANG_DATABASE_URL")
    assert result.stderr == (
        "LAYANG_DATABASE_URL: PostgreSQL needs the driver: pip install 'layang[postgresql]'\n"
    )


def _postgres_or_skip():
    import psycopg2

    try:
        psycopg2.connect(ADMIN_URL, connect_timeout=3).close()
    except psycopg2.OperationalError:
        pytest.skip("PostgreSQL is not reachable at LAYANG_TEST_POSTGRES_URL")


@pytest.mark.parametrize("command", [["run"], ["serve"], ["worker"], ["db", "upgrade"]])
def test_postgresql_refusing_us_stops_with_the_servers_reason(tmp_path, command):
    _postgres_or_skip()
    url = with_database(ADMIN_URL, "layang_no_such_database")
    http = free_port()
    result = layang(command, tmp_path, LAYANG_DATABASE_URL=url, **binds(http=http))
    assert_stopped_by(
        result, "LAYANG_DATABASE_URL", "refused", 'database "layang_no_such_database" does not'
    )


def test_postgresql_that_does_not_answer_stops_run_with_the_reason(tmp_path):
    url = f"postgresql://layang:pw@127.0.0.1:{free_port()}/layang"
    http, smtp = free_port(), free_port()
    result = layang(["run"], tmp_path, LAYANG_DATABASE_URL=url, **binds(http=http, smtp=smtp))
    # Exit status 1, not 2: nothing to fix in the settings, and a restart later may succeed.
    assert_stopped_by(
        result,
        "LAYANG_DATABASE_URL",
        "does not answer",
        "Connection refused",
        free=(http, smtp),
        status=1,
    )
    assert ":pw@" not in result.stderr


def test_a_sqlite_directory_that_cannot_be_made_stops_the_command(tmp_path):
    (tmp_path / "a-file").write_text("")
    url = f"sqlite:///{tmp_path / 'a-file' / 'db' / 'layang.db'}"
    result = layang(["db", "upgrade"], tmp_path, LAYANG_DATABASE_URL=url)
    assert_stopped_by(result, "LAYANG_DATABASE_URL", "is a file")


def test_a_sqlite_directory_on_a_read_only_file_system_stops_the_command(tmp_path):
    # /proc accepts no new directories, even from root (whom permission bits do not stop).
    result = layang(
        ["accounts", "create", "shop"],
        tmp_path,
        LAYANG_DATABASE_URL="sqlite:////proc/layang/layang.db",
    )
    assert_stopped_by(result, "LAYANG_DATABASE_URL", "cannot create /proc/layang")


@pytest.mark.parametrize(("command", "variable"), [(["run"], "http"), (["serve"], "http")])
def test_an_http_port_in_use_names_layang_http_bind(tmp_path, occupied, command, variable):
    smtp = free_port()
    result = layang(command, tmp_path, **binds(http=occupied, smtp=smtp))
    assert_stopped_by(result, "LAYANG_HTTP_BIND", f"127.0.0.1:{occupied} is already in use")
    assert port_is_free(smtp)


@pytest.mark.parametrize("command", [["run"], ["smtpd"]])
def test_an_smtp_port_in_use_stops_the_whole_command(tmp_path, occupied, command):
    http = free_port()
    result = layang(command, tmp_path, **binds(http=http, smtp=occupied))
    assert_stopped_by(result, "LAYANG_SMTP_BIND", "already in use", free=(http,))


def test_a_worker_metrics_port_in_use_stops_the_worker(tmp_path, occupied):
    result = layang(["worker"], tmp_path, **binds(worker_metrics=occupied))
    assert_stopped_by(result, "LAYANG_WORKER_METRICS_BIND", "already in use")


def test_an_address_of_another_machine_is_refused(tmp_path):
    result = layang(["serve"], tmp_path, LAYANG_HTTP_BIND="192.0.2.1:8000")
    assert_stopped_by(result, "LAYANG_HTTP_BIND", "not an address of this machine")


def test_the_same_port_for_http_and_smtp_is_refused(tmp_path):
    port = free_port()
    result = layang(["run"], tmp_path, **binds(http=port, smtp=port))
    assert_stopped_by(result, "LAYANG_SMTP_BIND", "already in use", free=(port,))


def test_a_missing_certificate_file_is_named(tmp_path):
    key = tmp_path / "key.pem"
    key.write_text("")
    result = layang(
        ["smtpd"],
        tmp_path,
        LAYANG_SMTP_TLS_CERT=str(tmp_path / "missing.pem"),
        LAYANG_SMTP_TLS_KEY=str(key),
        **binds(smtp=free_port()),
    )
    assert_stopped_by(result, "LAYANG_SMTP_TLS_CERT", "cannot read", "No such file")


def test_a_certificate_without_its_key_is_refused(tmp_path):
    result = layang(["smtpd"], tmp_path, LAYANG_SMTP_TLS_CERT=str(tmp_path / "c.pem"))
    assert_stopped_by(result, "LAYANG_SMTP_TLS_KEY", "set it too")


def test_a_key_that_does_not_match_the_certificate_is_refused(tmp_path):
    from layang.submission.tls import _generate

    _generate(tmp_path / "a.crt", tmp_path / "a.key", "a.test")
    _generate(tmp_path / "b.crt", tmp_path / "b.key", "b.test")
    smtp, http = free_port(), free_port()
    result = layang(
        ["run"],
        tmp_path,
        LAYANG_SMTP_TLS_CERT=str(tmp_path / "a.crt"),
        LAYANG_SMTP_TLS_KEY=str(tmp_path / "b.key"),
        **binds(http=http, smtp=smtp),
    )
    assert_stopped_by(result, "LAYANG_SMTP_TLS_KEY", "is not the key of the certificate")
    assert port_is_free(smtp) and port_is_free(http)


def test_a_file_that_is_not_a_certificate_is_refused(tmp_path):
    (tmp_path / "c.pem").write_text("hello")
    (tmp_path / "k.pem").write_text("hello")
    result = layang(
        ["smtpd"],
        tmp_path,
        LAYANG_SMTP_TLS_CERT=str(tmp_path / "c.pem"),
        LAYANG_SMTP_TLS_KEY=str(tmp_path / "k.pem"),
    )
    assert_stopped_by(result, "LAYANG_SMTP_TLS_CERT", "holds no PEM certificate")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LAYANG_LEASE_SECONDS", "soon"),
        ("LAYANG_MAX_MESSAGE_BYTES", "25MB"),
        ("LAYANG_HTTP_WORKERS", "0"),
        ("LAYANG_HTTP_BIND", "8000"),
        ("LAYANG_PUBLIC_URL", "mail.example.com"),
    ],
)
@pytest.mark.parametrize("command", [["run"], ["keys", "list", "default"]])
def test_a_setting_that_does_not_parse_stops_every_command(tmp_path, variable, value, command):
    result = layang(command, tmp_path, **{variable: value})
    assert_stopped_by(result, variable)
    assert not (tmp_path / "data").exists()


def test_a_data_dir_that_cannot_hold_the_secret_key_is_named(tmp_path):
    (tmp_path / "a-file").write_text("")
    result = layang(
        ["serve"], tmp_path, LAYANG_DATA_DIR=str(tmp_path / "a-file"), **binds(http=free_port())
    )
    assert_stopped_by(result, "LAYANG_DATA_DIR")


def test_the_checked_port_stays_held_until_the_server_takes_it(tmp_path):
    """No window between check and start: the bound socket is the one served."""
    port = free_port()
    config = Config(
        secret_key="a-secret-key-of-more-than-32-characters",
        data_dir=tmp_path,
        http_bind=f"127.0.0.1:{port}",
    )
    listeners = check(config, Needs(None, listeners=(HTTP,)))
    try:
        assert not port_is_free(port)
        sock = listeners.take(HTTP)
        assert sock.getsockname() == ("127.0.0.1", port)
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass  # it listens already: connections queue until the server accepts them
        sock.close()
    finally:
        listeners.close()
    assert port_is_free(port)


def test_a_postgresql_database_without_layang_is_not_migrated_by_a_read(tmp_path):
    import secrets

    from tests.postgres.server import query

    _postgres_or_skip()
    name = f"layang_empty_{secrets.token_hex(4)}"
    query(ADMIN_URL, f'CREATE DATABASE "{name}"')
    try:
        url = with_database(ADMIN_URL, name)
        result = layang(["keys", "list", "default"], tmp_path, LAYANG_DATABASE_URL=url)
        assert_stopped_by(result, "LAYANG_DATABASE_URL", "no Layang database", "no accounts")
        tables = query(url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        assert tables == []
    finally:
        query(ADMIN_URL, f'DROP DATABASE "{name}"')


@pytest.mark.parametrize(
    ("key", "fragment"),
    [
        ("short-but-not-empty", "19 characters is too short"),
        ("paste-the-key-from-the-command-above", "placeholder"),
        ("CHANGE_ME", "placeholder"),
        ("x" * 40, "placeholder"),
    ],
)
@pytest.mark.parametrize("command", [["run"], ["db", "upgrade"], ["worker"]])
def test_a_guessable_secret_key_stops_every_command(tmp_path, key, fragment, command):
    http, smtp = free_port(), free_port()
    result = layang(command, tmp_path, LAYANG_SECRET_KEY=key, **binds(http=http, smtp=smtp))
    assert_stopped_by(result, "LAYANG_SECRET_KEY", fragment, "secrets.token_urlsafe", free=(http,))
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("relay_url", ["mx", "MX:", "mx://"])
def test_mx_without_its_colon_is_refused_with_a_hint(tmp_path, relay_url):
    result = layang(["worker"], tmp_path, LAYANG_RELAY_URL=relay_url)
    assert_stopped_by(result, "LAYANG_RELAY_URL", f"{relay_url!r}", "write mx: (with its colon)")


def config_for(**values):
    return Config(secret_key="a-secret-key-of-more-than-32-characters", **values)


def test_an_ehlo_name_receivers_refuse_is_warned_of_only_for_direct_to_mx():
    from layang.serving.preflight import ehlo_warnings

    for name in ("localhost", "localhost.localdomain", "mailhost"):
        warned = ehlo_warnings(config_for(relay_url="mx:", ehlo_name=name))
        assert len(warned) == 1 and f"EHLO {name} (from LAYANG_EHLO_NAME)" in warned[0]
    assert ehlo_warnings(config_for(relay_url="mx:", ehlo_name="mta1.example.com")) == []
    assert ehlo_warnings(config_for(relay_url="smtp://relay:25", ehlo_name="localhost")) == []
    sources = (("127.0.0.1", "mta1.example.com"), ("::1", ""))
    warned = ehlo_warnings(
        config_for(relay_url="mx:", ehlo_name="localhost", source_addresses=sources)
    )
    assert warned == [
        "warning: direct to MX will say EHLO localhost (from LAYANG_SOURCE_ADDRESSES (::1)), "
        "which is not a fully qualified name: receivers refuse or junk such mail. Set "
        "LAYANG_EHLO_NAME (or LAYANG_SOURCE_ADDRESSES=ip=name) to the name the source "
        "address's PTR record gives"
    ]


@pytest.mark.parametrize("command", [["worker", "--processes", "1"], ["run"]])
def test_run_and_the_worker_warn_at_start_of_an_ehlo_localhost(tmp_path, command):
    import selectors
    import time

    workdir = tmp_path / "cwd"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env |= {
        "PYTHONPATH": str(ROOT),
        "LAYANG_DATA_DIR": str(tmp_path / "data"),
        "LAYANG_RELAY_URL": "mx:",
        "LAYANG_EHLO_NAME": "localhost",
        **binds(http=free_port(), smtp=free_port(), inbound=free_port()),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "layang", *command],
        cwd=workdir,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(process.stderr, selectors.EVENT_READ)
            deadline, line = time.monotonic() + 60, ""
            while time.monotonic() < deadline and not line.startswith("warning:"):
                if selector.select(timeout=1):
                    line = process.stderr.readline()
                    if not line:
                        break
    finally:
        process.terminate()
        process.communicate(timeout=120)
    assert line.startswith("warning: direct to MX will say EHLO localhost"), line
    assert "LAYANG_EHLO_NAME" in line
