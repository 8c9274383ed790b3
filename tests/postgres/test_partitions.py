"""The history tables' weekly partitions on PostgreSQL (migration 34): an existing database is
converted without losing a row, the worker makes the coming weeks' partitions, and retention
drops whole weeks, never one that still holds queued mail."""

from __future__ import annotations

import dataclasses
import datetime
import threading

import pytest

from layang.clock import now_ms
from layang.db import database, open_database
from layang.domain import records
from layang.ids import id_floor, new_id
from layang.lifecycle import partitions, retention
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
WEEK_MS = partitions.WEEK_MS
TABLES = [t.name for t in partitions.TABLES]


def week_of(at_ms: int) -> str:
    """The name's end of the partition holding ``at_ms``: its Monday."""
    monday = partitions.week_of(at_ms)
    return f"{datetime.datetime.fromtimestamp(monday / 1000, datetime.UTC):%Y%m%d}"


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
    # The old table is the partition up to the week after its newest row's (30 days ahead);
    # weekly partitions follow it once that week is near.
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
    assert where == "recipient_history"  # today is before the cut (the week after the newest)
    made = partitions.make_ahead(future)
    assert f"recipient_p{week_of(future + WEEK_MS)}" in made
    assert f"recipient_p{week_of(future)}" not in made
    later, later_rid = store_mail(acme.id, future + WEEK_MS + 5, 10)
    where = database.execute_sql(
        'SELECT tableoid::regclass::text FROM "event" WHERE "recipient_id" = %s', (later_rid,)
    ).fetchone()[0]
    assert where == f"event_p{week_of(future + WEEK_MS)}"
    assert Recipient.get_by_id(later_rid).transmission_id == later
    now_counted = database.execute_sql('SELECT sum("count") FROM "activity_count"').fetchone()[0]
    assert now_counted == counted + 2 * 2  # two records, each counted sent and delivered


def test_the_worker_makes_the_coming_weeks_partitions(empty_database, config, tmp_path):  # noqa: F811
    url = empty_database()
    open_database(url)
    upgrade()
    this_week = partitions.week_of(now_ms())
    last = partitions.week_of(now_ms() + partitions.AHEAD_DAYS * DAY_MS)
    ahead = list(range(this_week + WEEK_MS, last + 1, WEEK_MS))
    assert len(ahead) >= 2
    for week in ahead:
        for table in TABLES:
            name = f"{table}_p{week_of(week)}"
            database.execute_sql(f'ALTER TABLE "{table}" DETACH PARTITION "{name}"')
            database.execute_sql(f'DROP TABLE "{name}"')
    assert not any(week_of(last) in name for name in partition_names())

    # Several workers at once: each week is made once, and none of them fails.
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
    expected = {f"{table}_p{week_of(week)}" for week in ahead for table in TABLES}
    assert sorted(name for names in made for name in names) == sorted(expected)
    assert partitions.make_ahead() == []

    # A worker process makes the last week ahead by itself.
    for table in TABLES:
        database.execute_sql(f'ALTER TABLE "{table}" DETACH PARTITION "{table}_p{week_of(last)}"')
        database.execute_sql(f'DROP TABLE "{table}_p{week_of(last)}"')
    log = tmp_path / "worker.log"
    worker = start(["worker"], process_env(dataclasses.replace(config, database_url=url)), log)
    try:
        wait_while_running(
            lambda: {f"{t}_p{week_of(last)}" for t in TABLES} <= partition_names(),
            worker,
            log,
            "the worker made no partitions",
        )
    finally:
        stop(worker)
    # Rows of that week land in its partition, not the default one.
    acme = Account.create(name="acme", mode="live")
    _, rid = store_mail(acme.id, last + 10, 1)
    where = database.execute_sql(
        'SELECT tableoid::regclass::text FROM "recipient" WHERE "id" = %s', (rid,)
    ).fetchone()[0]
    assert where == f"recipient_p{week_of(last)}"


def test_retention_drops_whole_weeks_but_never_one_holding_queued_mail(
    empty_database,  # noqa: F811
    config,
):
    open_database(empty_database())
    upgrade()
    acme = Account.create(name="acme", mode="live")
    endpoint = WebhookEndpoint.create(account=acme, url="https://h.test/", events="*", secret=b"x")
    # Next week and the week after: partitions of their own (the migration made them).
    first = partitions.week_of(now_ms()) + WEEK_MS
    second = first + WEEK_MS
    gone_tid, gone_rid = store_mail(acme.id, first + 1000, 1)
    store_webhooks(endpoint.id, first + 1000)
    queued_tid, queued_rid = store_mail(acme.id, second + 1000, 2, queued=True)
    _, final_rid = store_mail(acme.id, second + 2000, 3)
    for week in (first, second):
        for table in TABLES:
            assert f"{table}_p{week_of(week)}" in partition_names()

    # Both weeks are past the horizon (45 days) once the second one has ended 45 days ago.
    now = second + WEEK_MS + config.retention_days * DAY_MS + 60_000
    removed = retention.apply(config, now)

    names = partition_names()
    assert not any(name.endswith(week_of(first)) for name in names)  # dropped, every table
    assert f"recipient_p{week_of(second)}" in names  # holds queued mail: stays
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

    # Once it is final, its week goes whole.
    Recipient.update(status="Delivery", next_attempt_at=None).where(
        Recipient.id == queued_rid
    ).execute()
    removed = retention.apply(config, now)
    assert removed.records == 1 and removed.events == 2 and removed.messages == 1
    assert not any(name.endswith(week_of(second)) for name in partition_names())
    assert Recipient.select().count() == Event.select().count() == 0


@pytest.mark.parametrize("days", [10])
def test_an_account_keeping_less_loses_its_rows_inside_a_kept_week(
    empty_database,  # noqa: F811
    config,
    days,
):
    open_database(empty_database())
    upgrade()
    short = Account.create(name="short", mode="live", retention_days=days)
    longer = Account.create(name="longer", mode="live")
    made = partitions.week_of(now_ms()) + WEEK_MS + 1000
    _, short_rid = store_mail(short.id, made, 1)
    _, long_rid = store_mail(longer.id, made, 2)

    removed = retention.apply(config, made + (days + 1) * DAY_MS)

    assert removed.records == 1
    assert Recipient.get_or_none(Recipient.id == short_rid) is None
    assert Recipient.get_by_id(long_rid).status == "Delivery"
    assert f"recipient_p{week_of(made)}" in partition_names()


def test_the_claim_sees_mail_queued_in_old_partitions(empty_database):  # noqa: F811
    from layang.delivery.queue import RECIPIENTS, claim_due_recipients

    open_database(empty_database())
    upgrade()
    acme = Account.create(name="acme", mode="live")
    # Weeks of their own back to ten weeks ago, as after weeks of sending; older than every
    # partition, a record lands in the default one.
    for table in TABLES:
        database.execute_sql(f'ALTER TABLE "{table}" DETACH PARTITION "{table}_history"')
        database.execute_sql(f'DROP TABLE "{table}_history"')
    this_week = partitions.week_of(now_ms())
    partitions.make_weeks(this_week - 10 * WEEK_MS, this_week)
    made = {
        "old week": this_week - 10 * WEEK_MS + 1000,
        "default": this_week - 60 * WEEK_MS,
        "this week": now_ms() - 120_000,
    }
    queued = {where: store_mail(acme.id, at_ms, n, queued=True)[1]
              for n, (where, at_ms) in enumerate(made.items())}  # fmt: skip
    for n in range(20):  # history beside them, delivered
        store_mail(acme.id, this_week - (n % 10) * WEEK_MS + 5000, 100 + n)
    where = {
        rid: database.execute_sql(
            'SELECT tableoid::regclass::text FROM "recipient" WHERE "id" = %s', (rid,)
        ).fetchone()[0]
        for rid in queued.values()
    }
    assert where[queued["old week"]] == f"recipient_p{week_of(made['old week'])}"
    assert where[queued["default"]] == "recipient_default"

    # Many times: the prepared statement's plan is the same for every run.
    for _ in range(8):
        claimed = claim_due_recipients("w1", 10, lease_seconds=60)
        # Oldest due first: the default partition's, then the old week's.
        assert [r.id for r in claimed] == [
            queued["default"],
            queued["old week"],
            queued["this week"],
        ]
        assert RECIPIENTS.release("w1") == 3
    one = claim_due_recipients("w1", 1, lease_seconds=60)
    assert [r.id for r in one] == [queued["default"]]
