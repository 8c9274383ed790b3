"""The history tables' daily partitions on PostgreSQL (migration 34): an existing database is
converted without losing a row, the worker makes the coming days' partitions, and retention
drops whole days, never one that still holds queued mail."""

from __future__ import annotations

import dataclasses
import datetime
import threading

import pytest

from layang.clock import now_ms
from layang.db import database, id_floor, new_id, open_database
from layang.domain import partitions, records, retention
from layang.migrations import MIGRATIONS, upgrade
from layang.models import (
    WEBHOOK_DELIVERED,
    Account,
    Event,
    PayloadChunk,
    Recipient,
    Transmission,
    TransmissionTag,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from tests.delivery.test_crash import process_env, start, stop, wait_while_running
from tests.test_migrations import empty_database  # noqa: F401 - fixture

DAY_MS = 86_400_000
TABLES = [t.name for t in partitions.TABLES]


def day_of(at_ms: int) -> str:
    return f"{datetime.datetime.fromtimestamp(at_ms / 1000, datetime.UTC):%Y%m%d}"


def partition_names() -> set[str]:
    return {p.name for p in partitions.partitions()}


def at(made_ms: int) -> str:
    """A fresh id as ``new_id`` makes it at ``made_ms``."""
    return id_floor(made_ms)[:10] + new_id()[10:]


def contents() -> dict[str, tuple[int, str]]:
    """Each history table's row count and a digest of every row's every column."""
    return {
        table: tuple(
            database.execute_sql(
                f"SELECT count(*), md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) "
                f'FROM "{table}" x'
            ).fetchone()
        )
        for table in TABLES
    }


def store_mail(account_id: int, made: int, n: int, *, queued: bool = False) -> tuple[str, str]:
    """A message with one record, its events, a tag and a chunk of content, as plain rows
    (written the same before migration 34 and after); returns (message id, record id)."""
    param = database.param
    tid, rid = at(made), at(made + 1)
    rows = [
        (
            "transmission",
            ("id", "account_id", "created_at", "source", "mail_from", "from_header", "subject",
             "message_id", "metadata", "payload", "tags"),
            (tid, account_id, made, "api", "a@shop.test", '{"email": "a@shop.test"}', f"m{n}",
             f"<{n}@shop.test>", "{}", None, '["receipt"]'),
        ),
        ("transmission_tag", ("transmission_id", "account_id", "tag"),
         (tid, account_id, "receipt")),
        ("payload_chunk", ("transmission_id", "seq", "text"), (tid, 0, '{"text": "hello"}')),
        (
            "recipient",
            ("id", "transmission_id", "account_id", "address", "recipient_type", "status",
             "created_at", "updated_at", "attempts", "next_attempt_at", "domain"),
            (rid, tid, account_id, f"r{n}@x.test", "to", "Delay" if queued else "Delivery", made,
             made + 1000, 1, made + 60_000 if queued else None, "x.test"),
        ),
        ("event", ("recipient_id", "status", "created_at", "detail"),
         (rid, "Injection", made, "{}")),
        (
            "event",
            ("recipient_id", "status", "created_at", "detail"),
            (rid, "Delay" if queued else "Delivery", made + 1000, "{}"),
        ),
    ]  # fmt: skip
    for table, columns, values in rows:
        names = ", ".join(f'"{c}"' for c in columns)
        marks = ", ".join([param] * len(values))
        database.execute_sql(f'INSERT INTO "{table}" ({names}) VALUES ({marks})', values)
    return tid, rid


def store_webhooks(endpoint_id: str, made: int) -> str:
    param = database.param
    delivery = at(made)
    database.execute_sql(
        'INSERT INTO "webhook_delivery" ("id", "endpoint_id", "event_ids", "body", "status", '
        f'"attempts", "created_at") VALUES ({", ".join([param] * 7)})',
        (delivery, endpoint_id, "[]", "{}", WEBHOOK_DELIVERED, 1, made),
    )
    database.execute_sql(
        'INSERT INTO "webhook_attempt" ("id", "delivery_id", "endpoint_id", "attempted_at", '
        f'"status") VALUES ({", ".join([param] * 5)})',
        (at(made), delivery, endpoint_id, made, WEBHOOK_DELIVERED),
    )
    database.execute_sql(
        'INSERT INTO "webhook_event" ("event_id", "endpoint_id", "status", "created_at", '
        f'"detail", "delivery_id") VALUES ({", ".join([param] * 6)})',
        (new_id(), endpoint_id, "Delivery", made, "{}", delivery),
    )
    return delivery


def test_an_existing_database_keeps_every_row_and_takes_new_mail(empty_database):  # noqa: F811
    open_database(empty_database())
    upgrade([m for m in MIGRATIONS if m.version < 34])
    acme = Account.create(name="acme", mode="live")
    endpoint = WebhookEndpoint.create(account=acme, url="https://h.test/", events="*", secret=b"x")
    now = now_ms()
    # Sixty and ten days old, today's, and some from a clock thirty days ahead.
    stored = [
        store_mail(acme.id, now + days * DAY_MS, n, queued=n == 0)
        for n, days in enumerate([-60, -10, 0, 30])
    ]
    for days in (-60, -10, 0, 30):
        store_webhooks(endpoint.id, now + days * DAY_MS)
    before = contents()
    assert all(count > 0 for count, _ in before.values())
    counted = database.execute_sql('SELECT sum("count") FROM "activity_count"').fetchone()[0]

    assert upgrade() == [34]

    assert contents() == before  # every row, every column
    kinds = database.execute_sql(
        "SELECT relname, relkind FROM pg_class WHERE relname = ANY(%s)", (TABLES,)
    ).fetchall()
    assert dict(kinds) == dict.fromkeys(TABLES, "p")
    # The old table is the partition up to the day after its newest row (the one 30 days
    # ahead); daily partitions follow it once that day is near.
    future = now + 30 * DAY_MS
    assert partition_names() == {f"{table}_history" for table in TABLES}
    # Read back the way the API reads them.
    page = records.list_activity(acme, limit=10)
    assert sorted(r.id for r in page.items) == sorted(rid for _, rid in stored)
    for tid, rid in stored:
        record = records.get_record(acme, rid)
        assert "Injection" in {e.status for e in record.events}
        assert records.get_transmission_view(acme, tid).recipients[0].id == rid
    assert records.list_activity(acme, tag="receipt", limit=10).items

    # New mail goes on being stored and counted, into the partitions.
    tid, rid = store_mail(acme.id, now_ms(), 9)
    where = database.execute_sql(
        'SELECT tableoid::regclass::text FROM "recipient" WHERE "id" = %s', (rid,)
    ).fetchone()[0]
    assert where == "recipient_history"  # today is before the cut (the day after the newest)
    made = partitions.make_ahead(future)
    assert f"recipient_p{day_of(future + DAY_MS)}" in made
    assert f"recipient_p{day_of(future)}" not in made
    later, later_rid = store_mail(acme.id, future + DAY_MS + 5, 10)
    where = database.execute_sql(
        'SELECT tableoid::regclass::text FROM "event" WHERE "recipient_id" = %s', (later_rid,)
    ).fetchone()[0]
    assert where == f"event_p{day_of(future + DAY_MS)}"
    assert Recipient.get_by_id(later_rid).transmission_id == later
    now_counted = database.execute_sql('SELECT sum("count") FROM "activity_count"').fetchone()[0]
    assert now_counted == counted + 2 * 2  # two records, each counted sent and delivered


def test_the_worker_makes_the_coming_days_partitions(empty_database, config, tmp_path):  # noqa: F811
    url = empty_database()
    open_database(url)
    upgrade()
    today = now_ms() // DAY_MS * DAY_MS
    ahead = [today + n * DAY_MS for n in range(2, partitions.AHEAD_DAYS + 1)]
    for day in ahead:
        for table in TABLES:
            name = f"{table}_p{day_of(day)}"
            database.execute_sql(f'ALTER TABLE "{table}" DETACH PARTITION "{name}"')
            database.execute_sql(f'DROP TABLE "{name}"')
    assert not any(day_of(ahead[-1]) in name for name in partition_names())

    # Several workers at once: each day is made once, and none of them fails.
    made: list[list[str]] = []
    errors: list[BaseException] = []

    def make() -> None:
        try:
            made.append(partitions.make_ahead())
        except BaseException as error:  # reported below
            errors.append(error)
        finally:
            database.close()

    threads = [threading.Thread(target=make) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    expected = {f"{table}_p{day_of(day)}" for day in ahead for table in TABLES}
    assert sorted(name for names in made for name in names) == sorted(expected)
    assert partitions.make_ahead() == []

    # A worker process makes tomorrow's week's last day, once the clock has moved on, by itself.
    last = ahead[-1]
    for table in TABLES:
        database.execute_sql(f'ALTER TABLE "{table}" DETACH PARTITION "{table}_p{day_of(last)}"')
        database.execute_sql(f'DROP TABLE "{table}_p{day_of(last)}"')
    log = tmp_path / "worker.log"
    worker = start(["worker"], process_env(dataclasses.replace(config, database_url=url)), log)
    try:
        wait_while_running(
            lambda: {f"{t}_p{day_of(last)}" for t in TABLES} <= partition_names(),
            worker,
            log,
            "the worker made no partitions",
        )
    finally:
        stop(worker)
    # Rows of that day land in its partition, not the default one.
    acme = Account.create(name="acme", mode="live")
    _, rid = store_mail(acme.id, last + 10, 1)
    where = database.execute_sql(
        'SELECT tableoid::regclass::text FROM "recipient" WHERE "id" = %s', (rid,)
    ).fetchone()[0]
    assert where == f"recipient_p{day_of(last)}"


def test_retention_drops_whole_days_but_never_one_holding_queued_mail(
    empty_database,  # noqa: F811
    config,
):
    open_database(empty_database())
    upgrade()
    acme = Account.create(name="acme", mode="live")
    endpoint = WebhookEndpoint.create(account=acme, url="https://h.test/", events="*", secret=b"x")
    today = now_ms() // DAY_MS * DAY_MS
    first, second = today + 2 * DAY_MS, today + 3 * DAY_MS
    gone_tid, gone_rid = store_mail(acme.id, first + 1000, 1)
    store_webhooks(endpoint.id, first + 1000)
    queued_tid, queued_rid = store_mail(acme.id, second + 1000, 2, queued=True)
    _, final_rid = store_mail(acme.id, second + 2000, 3)
    for day in (first, second):
        for table in TABLES:
            assert f"{table}_p{day_of(day)}" in partition_names()

    # Both days are past the horizon (45 days) once the second one has ended 45 days ago.
    now = second + DAY_MS + config.retention_days * DAY_MS + 60_000
    removed = retention.apply(config, now)

    names = partition_names()
    assert not any(name.endswith(day_of(first)) for name in names)  # dropped, every table
    assert f"recipient_p{day_of(second)}" in names  # holds queued mail: stays
    assert Recipient.get_or_none(Recipient.id == gone_rid) is None
    assert Transmission.get_or_none(Transmission.id == gone_tid) is None
    assert not TransmissionTag.select().where(TransmissionTag.transmission == gone_tid).exists()
    assert not PayloadChunk.select().where(PayloadChunk.transmission == gone_tid).exists()
    assert WebhookDelivery.select().count() == WebhookAttempt.select().count() == 0
    assert WebhookEvent.select().count() == 0
    # The queued record stays with its events and message, readable; the final one beside it
    # went row by row.
    assert Recipient.get_or_none(Recipient.id == final_rid) is None
    kept = records.get_record(acme, queued_rid)
    assert kept.status == "Delay" and "Delay" in [e.status for e in kept.events]
    assert Event.select().where(Event.recipient == queued_rid).count() == 2
    assert Transmission.get_by_id(queued_tid).payload is None  # chunked: kept in its chunks
    assert PayloadChunk.select().where(PayloadChunk.transmission == queued_tid).exists()
    assert (removed.records, removed.events, removed.messages) == (2, 4, 2)
    assert removed.webhook_deliveries == 1

    # Once it is final, its day goes whole.
    Recipient.update(status="Delivery", next_attempt_at=None).where(
        Recipient.id == queued_rid
    ).execute()
    removed = retention.apply(config, now)
    assert removed.records == 1 and removed.events == 2 and removed.messages == 1
    assert not any(name.endswith(day_of(second)) for name in partition_names())
    assert Recipient.select().count() == Event.select().count() == 0


@pytest.mark.parametrize("days", [10])
def test_an_account_keeping_less_loses_its_rows_inside_a_kept_day(
    empty_database,  # noqa: F811
    config,
    days,
):
    open_database(empty_database())
    upgrade()
    short = Account.create(name="short", mode="live", retention_days=days)
    longer = Account.create(name="longer", mode="live")
    made = now_ms() // DAY_MS * DAY_MS + 2 * DAY_MS + 1000
    _, short_rid = store_mail(short.id, made, 1)
    _, long_rid = store_mail(longer.id, made, 2)

    removed = retention.apply(config, made + (days + 1) * DAY_MS)

    assert removed.records == 1
    assert Recipient.get_or_none(Recipient.id == short_rid) is None
    assert Recipient.get_by_id(long_rid).status == "Delivery"
    assert f"recipient_p{day_of(made)}" in partition_names()
