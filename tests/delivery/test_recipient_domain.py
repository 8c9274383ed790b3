"""Every recipient row knows its domain: filled at enqueue, and backfilled by migration 10 for
the rows an older version stored, on SQLite and on PostgreSQL."""

from __future__ import annotations

import pytest

from layang.db import database, open_database
from layang.migrations import MIGRATIONS, upgrade
from layang.models import Recipient
from tests.conftest import BACKENDS
from tests.test_migrations import empty_database  # noqa: F401 - fixture

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

BEFORE = [m for m in MIGRATIONS if m.version < 10]


def test_rows_from_before_migration_10_get_their_domain(empty_database):  # noqa: F811
    open_database(empty_database())
    upgrade(BEFORE)
    database.execute_sql("INSERT INTO account (name, mode, created_at) VALUES ('a', 'live', 1)")
    database.execute_sql(
        "INSERT INTO transmission (id, account_id, created_at, source, mail_from, from_header, "
        "subject, message_id, metadata) VALUES ('t1', 1, 1, 'api', 's@x.test', '', '', 'm', '{}')"
    )
    for rid, address in (("r1", "ana@Mail.Example.COM"), ("r2", '"a@b"@two.example')):
        database.execute_sql(
            "INSERT INTO recipient (id, transmission_id, account_id, address, recipient_type, "
            "status, created_at, updated_at, attempts, next_attempt_at) "
            f"VALUES ('{rid}', 't1', 1, '{address}', 'to', 'Injection', 1, 1, 0, 1)"
        )
    assert 10 in upgrade()
    rows = {r.id: (r.domain, r.waiting_on) for r in Recipient.select()}
    assert rows == {"r1": ("mail.example.com", None), "r2": ("two.example", None)}


def test_mail_accepted_now_is_stored_with_its_domain(client, auth):
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@acme.test"},
            "subject": "Hi",
            "to": [{"email": "ana@Example.ORG"}],
            "cc": [{"email": "bo@sub.example.net"}],
            "bodyText": "hi",
        },
    )
    assert response.status_code == 200, response.get_json()
    assert sorted(r.domain for r in Recipient.select()) == ["example.org", "sub.example.net"]
