"""A real PostgreSQL for the tests: a throwaway database per session, clean tables per test, and
control over the server itself (stop, start) for the outage tests.

The server is reached at ``LAYANG_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), whose database is only used to create and
drop ``layang_test_<random>``. Without a reachable server these tests skip and say why; with
``LAYANG_REQUIRE_TOOLS`` set (CI) they fail instead.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Iterator
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


@pytest.fixture
def postgres_url(postgres_database: str) -> str:
    """The session database with every table emptied (the schema stays)."""
    conn = connect(postgres_database)
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
    return postgres_database


def reset_schema(url: str) -> None:
    """Drop every table, as on a database nobody has used yet."""
    query(url, "DROP SCHEMA public CASCADE; CREATE SCHEMA public")


class Cluster:
    """The Debian cluster serving the test database, driven with ``pg_ctlcluster``."""

    def __init__(self, version: str, name: str) -> None:
        self.version = version
        self.name = name

    def ctl(self, action: str) -> None:
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action],
            check=True,
            capture_output=True,
            timeout=60,
        )

    def stop(self) -> None:
        """Fast shutdown: sessions are ended, as on a restart or failover."""
        self.ctl("stop")

    def start(self) -> None:
        """Start (if it is not running) and wait until it accepts connections."""
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, "start"],
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                connect().close()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


@pytest.fixture
def cluster(postgres_database: str) -> Iterator[Cluster]:
    """The cluster behind the test database, started again at the end whatever happened."""
    if shutil.which("pg_ctlcluster") is None or shutil.which("pg_lsclusters") is None:
        unavailable("pg_ctlcluster is not installed (Debian's postgresql-common)")
    if os.geteuid() != 0:
        unavailable("stopping and starting PostgreSQL needs root")
    port = str(urlsplit(ADMIN_URL).port or 5432)
    listing = subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=True
    ).stdout
    found = [line.split() for line in listing.splitlines() if line.split()[2:3] == [port]]
    if not found:
        unavailable(f"no local cluster listens on port {port}: {listing!r}")
    server = Cluster(found[0][0], found[0][1])
    try:
        yield server
    finally:
        server.start()
