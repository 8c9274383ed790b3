"""Shared fixtures: a real SQLite file per test (or a real PostgreSQL database where a module asks
for both backends), the real app, a real upstream SMTP server."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import flask
import pytest
from flask.testing import FlaskClient

from layang.config import Config
from layang.db import database
from layang.delivery.worker import Worker
from layang.domain import accounts
from layang.models import Account
from layang.serving.app import create_app
from tests.postgres.server import (  # noqa: F401 - fixtures
    own_postgres,
    own_postgres_server,
    own_postgres_url,
    postgres_database,
    postgres_url,
)
from tests.support.browser import browser, live_server  # noqa: F401 - fixtures
from tests.support.dns_server import dns_zone  # noqa: F401 - fixture
from tests.support.internet import internet  # noqa: F401 - fixture
from tests.support.netns import two_hosts  # noqa: F401 - fixture
from tests.support.upstream import Upstream, tls_upstream, upstream  # noqa: F401 - fixtures
from tests.support.webhook_receiver import receiver  # noqa: F401 - fixture

BACKENDS = ("sqlite", "postgresql")


@pytest.fixture
def backend() -> str:
    """The database behind ``config``. SQLite unless a module parametrises it, e.g.
    ``pytestmark = pytest.mark.parametrize("backend", BACKENDS)`` to run on both."""
    return "sqlite"


@pytest.fixture
def config(tmp_path: Path, backend: str, request: pytest.FixtureRequest) -> Config:
    if backend == "postgresql":
        database_url = request.getfixturevalue("postgres_url")
    else:
        database_url = f"sqlite:///{tmp_path / 'layang.db'}"
    return Config(
        data_dir=tmp_path,
        database_url=database_url,
        relay_url=f"capture:{tmp_path / 'outbox'}",
        public_url="http://127.0.0.1:8000",
        secret_key="test-secret-key-for-the-layang-test-suite",
        retry_base_seconds=0.05,
        lease_seconds=5,
        worker_poll_seconds=0.05,
        # The simulated internet's hosts (MX, MTA-STS, TLS-RPT) are on loopback addresses.
        mx_allow_private=True,
    )


@pytest.fixture
def app(config: Config) -> Iterator[flask.Flask]:
    application = create_app(config)
    application.config["TESTING"] = True
    yield application
    if not database.is_closed():
        database.close()


@pytest.fixture
def client(app: flask.Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture
def account(app: flask.Flask) -> Account:
    return accounts.create_account("acme", live=True)


@pytest.fixture
def api_key(account: Account) -> str:
    return accounts.create_api_key(account, "tests")[1]


@pytest.fixture
def auth(api_key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"}


@pytest.fixture
def relay_to(config: Config) -> Callable[[Upstream], Worker]:
    """A worker relaying to the given upstream server."""
    workers: list[Worker] = []

    def make(server: Upstream, **changes: object) -> Worker:
        worker = Worker(replace(config, relay_url=server.url, **changes), name="test-worker")
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.close()


def drain(worker: Worker, until: Callable[[], bool] | None = None, timeout: float = 10) -> None:
    """Run worker cycles until nothing is due (or ``until`` holds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        claimed = worker.run_once()
        if until is not None:
            if until():
                return
        elif not claimed:
            return
        if not claimed:
            time.sleep(0.02)
    raise AssertionError("the worker did not finish in time")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
