"""A full disk under SQLite: the cause is told, /healthz and /metrics say so, nothing is lost.

``PRAGMA max_page_count`` caps the database file at its current size, so a write that needs
one more page fails with SQLITE_FULL ("database or disk is full"), the very error a full file
system gives, from SQLite itself.
"""

from __future__ import annotations

import logging

from layang.db import database
from layang.models import Transmission

URL = "/v1/layang/transmissions"


def send(client, auth, size=200_000):
    body = {
        "from": {"email": "shop@sender.test"},
        "subject": "Your order",
        "to": [{"email": "ana@rcpt.test"}],
        "bodyText": "x" * size,  # needs new pages
    }
    return client.post(URL, json=body, headers=auth)


def cap_the_file(pages: int | None = None) -> None:
    """Cap the database file at ``pages`` (default: its size now), on this connection and on
    any that replaces it after an error."""
    if pages is None:
        (pages,) = database.execute_sql("PRAGMA page_count").fetchone()
    db = database.obj
    db._pragmas = [(k, v) for k, v in db._pragmas if k != "max_page_count"]
    db._pragmas.append(("max_page_count", pages))
    database.execute_sql(f"PRAGMA max_page_count = {pages}")


def write_failures_metric(client) -> str:
    text = client.get("/metrics").get_data(as_text=True)
    return next(line for line in text.splitlines() if line.startswith("layang_database_writable"))


def test_disk_full_is_named_reported_and_recovers(client, auth, caplog):
    assert send(client, auth).status_code == 200
    assert write_failures_metric(client) == "layang_database_writable 1.0"
    cap_the_file()
    caplog.set_level(logging.INFO)

    for _ in range(3):
        response = send(client, auth)
        assert response.status_code == 503
        assert response.get_json()["error"] == "service_unavailable"
    assert Transmission.select().count() == 1  # nothing half-stored

    incident = [r for r in caplog.records if r.name == "layang.db" and r.levelno >= logging.ERROR]
    assert len(incident) == 1  # once per incident, not once per failed write
    assert "database or disk is full" in incident[0].getMessage()
    assert "cannot rollback" not in caplog.text

    health = client.get("/healthz")
    assert health.status_code == 503
    assert health.get_json() == {
        "error": "service_unavailable",
        "message": "Database writes are failing: database or disk is full.",
        "status": 503,
    }
    assert health.headers["Retry-After"]
    assert write_failures_metric(client) == "layang_database_writable 0.0"

    cap_the_file(1_073_741_823)  # space again
    assert send(client, auth).status_code == 200
    assert client.get("/healthz").status_code == 200
    assert write_failures_metric(client) == "layang_database_writable 1.0"
    assert "database writes succeed again" in caplog.text
