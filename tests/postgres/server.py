"""A real PostgreSQL for the tests: a throwaway database per session, clean tables per test; and,
for the outage tests that stop a server or end its sessions, a throwaway server of their own
(``own_postgres``), never the one at ``LAYANG_TEST_POSTGRES_URL``.

The server is reached at ``LAYANG_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), whose database is only used to create and
drop ``layang_test_<random>``. Without a reachable server these tests skip and say why; with
``LAYANG_REQUIRE_TOOLS`` set (CI) they fail instead.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit, urlunsplit

import pytest

ADMIN_URL = os.environ.get(
    "LAYANG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail where the tools are required (CI)."""
    if os.environ.get("LAYANG_REQUIRE_TOOLS"):
        pytest.fail(f"{reason} (LAYANG_REQUIRE_TOOLS is set)")
    pytest.skip(reason)


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` instead."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def connect(url: str = ADMIN_URL) -> Any:
    """An autocommit psycopg2 connection to ``url``."""
    import psycopg2

    conn = psycopg2.connect(url, connect_timeout=5)
    conn.autocommit = True
    return conn


def query(url: str, sql: str, params: tuple = ()) -> list[tuple]:
    """Run one statement on a fresh connection; returns its rows (none for a command)."""
    conn = connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else []
    finally:
        conn.close()


@pytest.fixture(scope="session")
def postgres_database() -> Iterator[str]:
    """URL of a database created for this test session and dropped at its end."""
    try:
        import psycopg2
    except ImportError:
        unavailable("psycopg2 is not installed: pip install -e '.[test]'")
    target = urlsplit(ADMIN_URL)
    try:
        admin = connect()
    except psycopg2.OperationalError as error:
        unavailable(
            f"PostgreSQL is not reachable at {target.hostname}:{target.port or 5432} "
            f"({' '.join(str(error).split())}); start it or set LAYANG_TEST_POSTGRES_URL"
        )
    name = f"layang_test_{secrets.token_hex(4)}"
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        admin.close()
    try:
        yield with_database(ADMIN_URL, name)
    finally:
        # FORCE ends whatever sessions a killed process may have left behind.
        query(ADMIN_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def empty_tables(url: str) -> str:
    """Empty every table of ``url``'s database (the schema stays); returns ``url``."""
    conn = connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute("SET lock_timeout = '10s'")
            cursor.execute(
                "SELECT tablename FROM pg_tables "
                "WHERE schemaname = current_schema() AND tablename <> 'schema_version'"
            )
            tables = [row[0] for row in cursor.fetchall()]
            if tables:
                names = ", ".join(f'"{table}"' for table in tables)
                cursor.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")
    finally:
        conn.close()
    return url


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """The session database with every table emptied (the schema stays)."""
    return empty_tables(postgres_database)


def reset_schema(url: str) -> None:
    """Drop every table, as on a database nobody has used yet."""
    query(url, "DROP SCHEMA public CASCADE; CREATE SCHEMA public")


def _postgres_bin_dir() -> Path | None:
    """Where PostgreSQL's server programs are (Debian keeps them off the PATH)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"),
        key=lambda path: int(path.parts[-3]) if path.parts[-3].isdigit() else 0,
    )
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OwnServer:
    """A PostgreSQL server of the tests' own: initdb into a temporary directory, its own port
    on 127.0.0.1 and its own socket directory, run as an unprivileged user (``postgres`` when
    the tests run as root, as PostgreSQL refuses root). Only this server is ever stopped."""

    USER = "layang_test"

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        # As root the server runs as postgres, who must reach the directory: not under a
        # private $TMPDIR.
        parent = "/tmp" if os.geteuid() == 0 else None
        self.directory = Path(tempfile.mkdtemp(prefix="layang-pg-", dir=parent))
        self.data = self.directory / "data"
        self.log = self.directory / "server.log"
        self.port = _free_port()
        self.password = secrets.token_hex(16)
        self.run_as: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
            self.run_as = ["runuser", "-u", "postgres", "--"]
        password_file = self.directory / "password"
        password_file.write_text(self.password + "\n")
        if self.run_as:
            os.chown(password_file, owner.pw_uid, owner.pw_gid)
        self._run(
            "initdb",
            f"--pgdata={self.data}",
            f"--username={self.USER}",
            f"--pwfile={password_file}",
            "--auth=scram-sha-256",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )
        password_file.unlink()
        self.url = f"postgresql://{self.USER}:{self.password}@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, check: bool = True) -> None:
        subprocess.run(
            [*self.run_as, str(self.bin_dir / program), *args],
            check=check,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        """Start (if it is not running) and wait until it accepts connections."""
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=200"
        )
        command = ["-D", str(self.data), "-l", str(self.log), "-o", options, "start"]
        self._run("pg_ctl", *command, check=False)
        deadline = time.monotonic() + 60
        while True:
            try:
                connect(self.url).close()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the test's PostgreSQL did not start: {self.log_text()}")
                time.sleep(0.1)

    def stop(self) -> None:
        """Fast shutdown: sessions are ended, as on a restart or failover."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.directory, ignore_errors=True)

    def log_text(self) -> str:
        try:
            return self.log.read_text()
        except OSError:
            return "(no log)"


@pytest.fixture(scope="session")
def own_postgres_server() -> Iterator[OwnServer]:
    """A throwaway PostgreSQL server for this test session, for the tests that stop it or end
    its sessions; removed at the end."""
    bin_dir = _postgres_bin_dir()
    if bin_dir is None or not (bin_dir / "initdb").exists():
        unavailable("PostgreSQL's initdb and pg_ctl are not installed (the postgresql package)")
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        unavailable("psycopg2 is not installed: pip install -e '.[test]'")
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        unavailable("running PostgreSQL as root's tests needs runuser (util-linux)")
    server = OwnServer(bin_dir)
    try:
        server.start()
        query(server.url, 'CREATE DATABASE "layang"')
        yield server
    finally:
        server.remove()


@pytest.fixture
def own_postgres(own_postgres_server: OwnServer) -> Iterator[OwnServer]:
    """The throwaway server, running, with the tables of its ``layang`` database emptied; it is
    started again after the test whatever happened."""
    empty_tables(with_database(own_postgres_server.url, "layang"))
    try:
        yield own_postgres_server
    finally:
        own_postgres_server.start()


@pytest.fixture
def own_postgres_url(own_postgres: OwnServer) -> str:
    """The URL of the throwaway server's database, tables emptied."""
    return with_database(own_postgres.url, "layang")
