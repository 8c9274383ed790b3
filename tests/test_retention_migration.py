"""Migration 26 on a database holding mail: nothing is lost, every account keeps the service's
retention and stores content, and retention then ages the mail that was already there."""

from __future__ import annotations

import pytest

from layang.db import database, open_database
from layang.ids import id_floor
from layang.lifecycle import retention
from layang.migrations import MIGRATIONS, upgrade
from layang.models import Account, Event, Recipient, Transmission
from tests.conftest import BACKENDS
from tests.test_migrations import empty_database  # noqa: F401 - fixture

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

DAY_MS = 86_400_000
NOW = 1_800_000_000_000


def _id(at: int, n: int) -> str:
    return id_floor(at)[:20] + f"{n:06d}"


def test_an_existing_database_keeps_its_mail_and_then_ages_it(empty_database, config):  # noqa: F811
    open_database(empty_database())
    upgrade([m for m in MIGRATIONS if m.version < 26])
    param = database.param
    database.execute_sql(
        f'INSERT INTO "account" ("name", "mode", "created_at") VALUES ({param}, {param}, {param})',
        ("acme", "live", NOW),
    )
    account_id = database.execute_sql('SELECT "id" FROM "account"').fetchone()[0]
    for n, (age_days, status, queued) in enumerate(
        [
            (60, "Delivery", False),
            (10, "Delivery", False),
            (60, "Delay", True),
            (1, "Bounce", False),
        ]
    ):
        at = NOW - age_days * DAY_MS
        tid, rid = _id(at, 2 * n), _id(at, 2 * n + 1)
        database.execute_sql(
            'INSERT INTO "transmission" ("id", "account_id", "created_at", "source", "mail_from", '
            '"from_header", "subject", "message_id", "metadata", "payload") '
            f"VALUES ({', '.join([param] * 10)})",
            (tid, account_id, at, "api", "a@shop.test", '{"email": "a@shop.test"}', f"m{n}",
             f"<{n}@shop.test>", "{}", '{"text": "secret"}'),
        )  # fmt: skip
        database.execute_sql(
            'INSERT INTO "recipient" ("id", "transmission_id", "account_id", "address", '
            '"recipient_type", "status", "created_at", "updated_at", "attempts", '
            f'"next_attempt_at") VALUES ({", ".join([param] * 10)})',
            (rid, tid, account_id, f"r{n}@x.test", "to", status, at, at + 1000, 1,
             NOW + 60_000 if queued else None),
        )  # fmt: skip
        database.execute_sql(
            'INSERT INTO "event" ("recipient_id", "status", "created_at", "detail") '
            f"VALUES ({param}, {param}, {param}, {param})",
            (rid, status, at + 1000, "{}"),
        )

    assert upgrade() == [m.version for m in MIGRATIONS if m.version >= 26]

    acme = Account.get(Account.name == "acme")
    assert (acme.retention_days, acme.content_days, acme.store_content) == (None, None, True)
    assert Transmission.select().count() == Recipient.select().count() == Event.select().count()
    assert Transmission.select().where(Transmission.content_expired_at.is_null()).count() == 4

    removed = retention.apply(config, NOW)
    # The 60-day-old delivered mail goes whole; the 10-day-old keeps its record, not its
    # content; the queued one stays whatever its age; yesterday's bounce keeps everything.
    assert removed.as_json() == {
        "records": 1,
        "events": 1,
        "messages": 1,
        "contents": 2,
        "webhookDeliveries": 0,
    }
    left = {t.subject: t for t in Transmission.select()}
    assert set(left) == {"m1", "m2", "m3"}
    assert left["m1"].payload is None and left["m1"].content_expired_at == NOW
    assert left["m2"].payload is not None and left["m3"].payload is not None
