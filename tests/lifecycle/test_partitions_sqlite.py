"""On SQLite nothing is partitioned: migration 34 changes nothing, the workers make no
partitions, and retention goes on removing rows in bounded batches."""

from __future__ import annotations

from layang.clock import now_ms
from layang.db import open_database
from layang.lifecycle import partitions, retention
from layang.migrations import MIGRATIONS, upgrade
from layang.migrations.schema import describe_sqlite
from layang.models import Account, Recipient, Transmission
from tests.lifecycle.test_retention import DAY_MS, send


def test_migration_34_leaves_a_sqlite_database_as_it_was(tmp_path):
    path = tmp_path / "layang.db"
    open_database(f"sqlite:///{path}")
    upgrade([m for m in MIGRATIONS if m.version < 34])
    Account.create(name="acme")
    before = describe_sqlite(path)
    assert upgrade() == [34]
    assert describe_sqlite(path) == before
    assert [a.name for a in Account.select()] == ["acme"]
    assert not partitions.partitioned()
    assert partitions.make_ahead() == []
    assert partitions.drop_before(now_ms() + 1000 * DAY_MS).partitions == ()


def test_retention_deletes_in_batches_on_sqlite(client, auth, config, monkeypatch):
    monkeypatch.setattr(retention, "BATCH", 3)
    batches: list[int] = []
    remove = retention.remove_records

    def counted(record_ids, transmission_ids):
        batches.append(len(record_ids))
        return remove(record_ids, transmission_ids)

    monkeypatch.setattr(retention, "remove_records", counted)
    tids = [send(client, auth, [f"r{n}@rcpt.test"]) for n in range(8)]
    Recipient.update(status="Delivery", next_attempt_at=None).execute()

    removed = retention.apply(config, now_ms() + 50 * DAY_MS)

    assert batches == [3, 3, 2]
    assert removed.records == 8 and removed.messages == 8
    assert Transmission.select().where(Transmission.id.in_(tids)).count() == 0
