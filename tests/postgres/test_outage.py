"""In-process behaviour when the PostgreSQL connection breaks or the server cannot be reached.

Sessions are ended on the tests' own throwaway server (``own_postgres``), never on a server
others use."""

from __future__ import annotations

import socket
import time
from dataclasses import replace

import flask
import pytest

from layang.db import UNAVAILABLE_ERRORS, database, discard_connection
from layang.models import Account, Recipient
from layang.serving.app import create_app
from tests.postgres.server import connect

MESSAGE = {
    "from": {"email": "shop@sender.test"},
    "subject": "hello",
    "to": [{"email": "ana@rcpt.test"}],
    "bodyText": "hi",
}
UNAVAILABLE = {
    "error": "service_unavailable",
    "message": "The database is unavailable; try again shortly.",
    "status": 503,
}


@pytest.fixture
def postgres_url(own_postgres_url: str) -> str:
    return own_postgres_url


OTHER_SESSIONS = (
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def end_other_sessions(url: str) -> int:
    """Terminate every session on ``url``'s database but the caller's, as a restart would, and
    wait until they are gone."""
    conn = connect(url)
    try:
        with conn.cursor() as cursor:
            cursor.execute(f"SELECT count(pg_terminate_backend(pid)) {OTHER_SESSIONS}")
            ended = cursor.fetchone()[0]
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                cursor.execute(f"SELECT count(*) {OTHER_SESSIONS}")
                if cursor.fetchone()[0] == 0:
                    break
                time.sleep(0.01)
            return ended
    finally:
        conn.close()


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_api_reconnects_after_the_server_ended_its_session(client, auth, config):
    assert client.post("/v1/layang/transmissions", json=MESSAGE, headers=auth).status_code == 200
    assert end_other_sessions(config.database_url) >= 1
    # The dead connection is noticed before it is used: no request fails.
    response = client.post("/v1/layang/transmissions", json=MESSAGE, headers=auth)
    assert response.status_code == 200, response.get_json()
    assert client.get("/healthz").status_code == 200


def test_worker_reconnects_after_the_server_ended_its_session(
    client, auth, config, upstream, relay_to
):
    worker = relay_to(upstream)
    client.post("/v1/layang/transmissions", json=MESSAGE, headers=auth)
    assert worker.run_once() == 1
    client.post("/v1/layang/transmissions", json=MESSAGE, headers=auth)
    end_other_sessions(config.database_url)
    assert worker.run_once() == 1
    assert Recipient.select().where(Recipient.status == "Delivery").count() == 2


def test_a_transaction_cut_off_by_the_server_fails_instead_of_committing_nothing(app, config):
    with pytest.raises(UNAVAILABLE_ERRORS), database.atomic():
        Account.create(name="cut-off")
        end_other_sessions(config.database_url)
    discard_connection()
    assert not Account.select().where(Account.name == "cut-off").exists()
    Account.create(name="after")  # and the next statement has a working connection again


@pytest.fixture
def unreachable_app(config) -> flask.Flask:
    """The app started while its database server is down (nothing listens on its port)."""
    url = f"postgresql://layang@127.0.0.1:{closed_port()}/layang"
    app = create_app(replace(config, database_url=url))
    app.config["TESTING"] = True
    yield app
    database.dispose()


def test_requests_get_a_clean_503_while_the_database_is_down(unreachable_app, api_key_secret):
    client = unreachable_app.test_client()
    for response in (
        client.get("/healthz"),
        client.post(
            "/v1/layang/transmissions",
            json=MESSAGE,
            headers={"Authorization": f"Bearer {api_key_secret}"},
        ),
        client.get("/v1/layang/activity", headers={"Authorization": f"Bearer {api_key_secret}"}),
    ):
        assert response.status_code == 503
        assert response.get_json() == UNAVAILABLE
        assert response.headers["Retry-After"] == "5"
    metrics = client.get("/metrics")
    assert metrics.status_code == 200
    assert "layang_database_up 0.0" in metrics.get_data(as_text=True)


@pytest.fixture
def api_key_secret() -> str:
    return "lyg_" + "a" * 43


def test_the_claim_is_prepared_again_on_a_new_connection(queue_many, config):
    from layang.delivery.queue import claim_due_recipients

    def prepared() -> list[str]:
        return [row[0] for row in database.execute_sql("SELECT name FROM pg_prepared_statements")]

    queue_many(3)
    assert len(claim_due_recipients("w1", 1, lease_seconds=60)) == 1
    assert prepared() == ["layang_claim_recipient"]
    assert end_other_sessions(config.database_url) >= 1
    # A new connection: the statement is prepared there before it runs.
    assert len(claim_due_recipients("w1", 1, lease_seconds=60)) == 1
    assert prepared() == ["layang_claim_recipient"]
    database.execute_sql("DEALLOCATE ALL")  # as a connection pooler's DISCARD ALL would
    assert len(claim_due_recipients("w1", 5, lease_seconds=60)) == 1
    assert Recipient.select().where(Recipient.lease_owner == "w1").count() == 3
