"""The migrations: an old database upgrades to the schema a fresh one gets, which is the schema the
models describe; each migration runs once however many processes start together, and a
server's workers leave it to their master."""

from __future__ import annotations

import json
import os
import secrets
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from layang.db import database, open_database
from layang.migrations import MIGRATIONS, POSTGRESQL, SQLITE, SchemaVersion, upgrade
from layang.migrations.schema import describe_postgresql, describe_sqlite
from layang.models import MODELS, Account
from tests.conftest import BACKENDS
from tests.delivery.test_crash import ROOT, _healthy, free_port, wait_until
from tests.postgres.server import ADMIN_URL, query, with_database

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

LATEST = [migration.version for migration in MIGRATIONS]


@pytest.fixture
def empty_database(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[[], str]]:
    """Makes URLs of databases nobody has used yet, on the test's backend."""
    made: list[str] = []

    def make() -> str:
        name = f"layang_migrations_{secrets.token_hex(4)}"
        if backend == "sqlite":
            return f"sqlite:///{tmp_path / name}.db"
        request.getfixturevalue("postgres_database")  # skips when there is no server
        query(ADMIN_URL, f'CREATE DATABASE "{name}"')
        made.append(name)
        return with_database(ADMIN_URL, name)

    yield make
    if database.obj is not None:
        database.close()
    for name in made:
        query(ADMIN_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def describe(url: str) -> dict[str, object]:
    """Every table's columns, indexes and constraints, as the database itself reports them."""
    if url.startswith("sqlite:"):
        return _describe_sqlite(url.split(":///", 1)[1])
    return _describe_postgresql(url)


def _describe_sqlite(path: str) -> dict[str, object]:
    conn = sqlite3.connect(path)
    try:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' "
                "AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        schema: dict[str, object] = {}
        for table in tables:
            # (name, type, not null, default, position in the primary key)
            columns = [row[1:] for row in conn.execute(f'PRAGMA table_info("{table}")')]
            indexes = {
                name: (unique, origin, [c[2] for c in conn.execute(f'PRAGMA index_info("{name}")')])
                for _, name, unique, origin, _ in conn.execute(f'PRAGMA index_list("{table}")')
            }
            # (table, from, to, on update, on delete, match)
            foreign_keys = sorted(
                row[2:] for row in conn.execute(f'PRAGMA foreign_key_list("{table}")')
            )
            schema[table] = {"columns": columns, "indexes": indexes, "foreign_keys": foreign_keys}
        return schema
    finally:
        conn.close()


# The partitions of a partitioned table (named by the day they were made for) are left out;
# the table itself is described with its partition key.
_NOT_A_PARTITION = (
    "NOT IN (SELECT relname FROM pg_class WHERE relispartition "
    "AND relnamespace = current_schema()::regnamespace)"
)


def _describe_postgresql(url: str) -> dict[str, object]:
    columns = query(
        url,
        "SELECT table_name, column_name, data_type, character_maximum_length, is_nullable, "
        "column_default FROM information_schema.columns WHERE table_schema = current_schema() "
        f"AND table_name {_NOT_A_PARTITION} ORDER BY table_name, ordinal_position",
    )
    # The definitions PostgreSQL prints back: name, uniqueness, columns, method.
    indexes = query(
        url,
        "SELECT tablename, indexname, indexdef FROM pg_indexes "
        f"WHERE schemaname = current_schema() AND tablename {_NOT_A_PARTITION} "
        "ORDER BY indexname",
    )
    # Primary keys, unique constraints and foreign keys with their ON DELETE.
    constraints = query(
        url,
        "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
        "WHERE connamespace = current_schema()::regnamespace "
        f"AND conrelid::regclass::text {_NOT_A_PARTITION} ORDER BY conname",
    )
    partition_keys = query(
        url,
        "SELECT relname, pg_get_partkeydef(oid) FROM pg_class "
        "WHERE relkind = 'p' AND relnamespace = current_schema()::regnamespace",
    )
    schema: dict[str, dict[str, list[tuple]]] = {}
    for table, *column in columns:
        schema.setdefault(table, {}).setdefault("columns", []).append(tuple(column))
    for table, *index in indexes:
        schema[table].setdefault("indexes", []).append(tuple(index))
    for table, *constraint in constraints:
        schema[table].setdefault("constraints", []).append(tuple(constraint))
    for table, key in partition_keys:
        schema[table]["partition_key"] = [(key,)]
    return schema


def definitions(url: str) -> str:
    """Every definition, functions and triggers included, as docs/schema.sql shows them."""
    if url.startswith("sqlite:"):
        return describe_sqlite(url.split(":///", 1)[1])
    return describe_postgresql(url)


def test_a_database_left_at_any_version_upgrades_to_the_models_schema(empty_database, backend):
    fresh = empty_database()
    open_database(fresh)
    assert upgrade() == LATEST

    # Versions are not contiguous (9 and 13 were never used): stop after each migration.
    for applied in range(1, len(MIGRATIONS)):
        stopped_at = LATEST[applied - 1]
        old = empty_database()
        open_database(old)
        assert upgrade(MIGRATIONS[:applied]) == LATEST[:applied]
        if stopped_at == 1:
            Account.create(name="from-version-1")
        assert upgrade() == LATEST[applied:]
        assert describe(old) == describe(fresh), f"upgraded from version {stopped_at}"
        assert definitions(old) == definitions(fresh), f"upgraded from version {stopped_at}"
        if stopped_at == 1:
            assert [account.name for account in Account.select()] == ["from-version-1"]

    # What peewee makes of today's models, schema_version included, is what the migrations made,
    # once partitioned as migration 34 partitions (on PostgreSQL; peewee knows no partitions).
    from_models = empty_database()
    models = [*MODELS, SchemaVersion]
    db = open_database(from_models)
    # Bound explicitly: a test elsewhere may have bound the template store's models to its own.
    with db.bind_ctx(models):
        db.create_tables(models)
    partitioning = next(m for m in MIGRATIONS if m.version == 34)
    with database.atomic():
        for statement in partitioning.statements(POSTGRESQL if backend == "postgresql" else SQLITE):
            database.execute_sql(statement)
    assert describe(from_models) == describe(fresh)


def test_upgrade_is_idempotent(empty_database):
    url = empty_database()
    open_database(url)
    assert upgrade() == LATEST
    schema = describe(url)
    assert upgrade() == []
    assert describe(url) == schema
    assert [row.version for row in SchemaVersion.select().order_by(SchemaVersion.version)] == LATEST


def process_env(tmp_path: Path, url: str, **extra: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp_path),
        LAYANG_DATABASE_URL=url,
        LAYANG_RELAY_URL=f"capture:{tmp_path / 'outbox'}",
        LAYANG_SECRET_KEY="test-secret-key-for-the-layang-test-suite",
        PYTHONUNBUFFERED="1",
    )
    env.update({k: str(v) for k, v in extra.items()})
    return env


def test_processes_upgrading_at_once_apply_each_migration_once(empty_database, tmp_path):
    url = empty_database()
    env = process_env(tmp_path, url)
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "layang", "db", "upgrade"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    applied = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        applied.extend(json.loads(out)["applied"])
    assert sorted(applied) == LATEST
    open_database(url)
    assert SchemaVersion.select().count() == len(LATEST)


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "layang", "serve"],
        ["-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"],
    ],
    ids=["layang-serve", "gunicorn-conf"],
)
def test_serve_upgrades_once_in_the_master_not_in_each_worker(empty_database, tmp_path, command):
    port = free_port()
    env = process_env(
        tmp_path, empty_database(), LAYANG_HTTP_BIND=f"127.0.0.1:{port}", LAYANG_HTTP_WORKERS=3
    )
    log_path = tmp_path / "serve.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [sys.executable, *command], env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_until(
            lambda: _healthy(port) and log_path.read_text().count("Booting worker") == 3,
            30,
            log_path.read_text(),
        )
    finally:
        # A worker still loading the app finishes doing so (and logging) before it exits.
        server.send_signal(signal.SIGTERM)
        server.wait(30)
    text = log_path.read_text()
    assert text.count("schema up to date") == 1, text
    assert text.count("schema migration") == len(LATEST), text
    assert "Traceback" not in text


def test_the_overviews_counts_start_from_the_mail_already_stored(empty_database):
    """Migration 18 counts what was there before it, once (and 21 again, by stream); the
    triggers count what follows."""
    from layang.domain import overview
    from layang.mail.events import append_events
    from layang.models import Event, Recipient, Transmission

    open_database(empty_database())
    before = [m for m in MIGRATIONS if m.version < 18]
    upgrade(before)
    now = overview.HOUR_MS * 500_000
    acme = Account.create(name="acme", mode="live", created_at=now)
    sent = Transmission.create(
        account=acme, created_at=now, mail_from="a@Shop.test", message_id="<m@x>",
        from_header=json.dumps({"email": "a@Shop.test"}),
    )  # fmt: skip
    kept = [
        Recipient.create(transmission=sent, account=acme, address=f"r{n}@x.test",
                         recipient_type="to", status=status, created_at=now)
        for n, status in enumerate(["Delivery", "Bounce", "Suppressed"])
    ]  # fmt: skip
    Event.insert_many(
        [
            (kept[0], "Delivery", now, "{}"),
            (kept[1], "Bounce", now, '{"bounceClass": "block"}'),
            (kept[2], "Suppressed", now, "{}"),
        ],
        fields=[Event.recipient, Event.status, Event.created_at, Event.detail],
    ).execute()
    assert upgrade() == LATEST[LATEST.index(18) :]
    with database.atomic():
        append_events([(kept[0].id, "Open", now + 1, "{}")])

    day = overview.activity(acme, overview.PERIODS["24h"], now=now + 2)
    totals = {s.key: s.total for s in day.chart.series}
    shown = (totals["sent"], totals["delivered"], totals["bounced"], totals["opened"])
    assert shown == (2, 1, 1, 1)
    assert {s.key: s.total for s in day.bounces.series}["block"] == 1
    assert [d.domain for d in day.domains] == ["shop.test"]


def counts() -> tuple[tuple[str, ...], dict[tuple, int]]:
    """The overview's counts: the names of their key columns, and each key's count."""
    cursor = database.execute_sql('SELECT * FROM "activity_count"')
    names = [column[0] for column in cursor.description]
    key = tuple(n for n in names if n not in ("id", "account_id", "count"))
    rows = {
        tuple(row[names.index(n)] for n in key): row[names.index("count")]
        for row in cursor.fetchall()
    }
    return key, rows


def test_the_overviews_counts_gain_the_stream_and_keep_what_was_counted(empty_database):
    """Migration 21 makes the counts again by stream, as the triggers counted them: mail that
    a worker suppressed after it was stored stays sent, mail suppressed on arrival never was.
    The triggers count by stream from then on."""
    from layang.mail.events import append_events
    from layang.mail.outbox import Submission, enqueue
    from layang.mail.suppression import suppressed_event_detail
    from layang.models import Recipient

    open_database(empty_database())
    upgrade([m for m in MIGRATIONS if m.version < 21])
    hour = 3_600_000
    now = hour * 500_000 + 60_000
    acme = Account.create(name="acme", mode="live", created_at=now)

    def store(number: int, stream: str, sender: str, *to: str, suppressed=()) -> list[str]:
        tid = f"{number:026d}"
        enqueue(acme, Submission(
            transmission_id=tid, created_at=now, source="api", mail_from=sender,
            from_header=json.dumps({"email": sender}), subject="Hi", message_id=f"<{tid}@x>",
            metadata={}, recipients=[(a, "to") for a in to], raw=b"Subject: Hi\r\n\r\nHi",
            suppressed={a: "unsubscribe" for a in suppressed}, stream=stream,
        ))  # fmt: skip
        ids = {
            r.address: r.id
            for r in Recipient.select(Recipient.id, Recipient.address).where(
                Recipient.transmission == tid
            )
        }
        return [ids[a] for a in to]

    news = store(1, "broadcast", "news@Shop.test", "a@x.test", "b@x.test", "gone@x.test",
                 "late@x.test", suppressed=["gone@x.test"])  # fmt: skip
    reset = store(2, "transactional", "id@shop.test", "c@x.test", "late@x.test")
    later = now + 2 * hour
    with database.atomic():
        # What a worker does when an address went on the list while its mail waited.
        Recipient.update(status="Suppressed", updated_at=later, next_attempt_at=None).where(
            Recipient.id.in_([news[3], reset[1]])
        ).execute()
        append_events([
            (news[3], "Suppressed", later, suppressed_event_detail("unsubscribe")),
            (reset[1], "Suppressed", later, suppressed_event_detail("manual")),
            (news[0], "Delivery", later, "{}"),
            (news[1], "Bounce", later, '{"bounceClass": "hard"}'),
            (news[0], "Open", later + 1, "{}"),
            (reset[0], "Delivery", later, "{}"),
            (reset[0], "Complaint", later + 1, "{}"),
        ])  # fmt: skip
    key, before = counts()
    assert key == ("hour", "domain", "kind")

    assert upgrade([m for m in MIGRATIONS if m.version <= 21]) == [21]
    key, after = counts()
    assert key == ("hour", "domain", "kind", "stream")
    stored, settled = now // hour * hour, later // hour * hour
    assert after == {
        (stored, "shop.test", "Injection", "broadcast"): 3,  # not gone@, suppressed on arrival
        (stored, "shop.test", "Suppressed", "broadcast"): 1,
        (stored, "shop.test", "Injection", "transactional"): 2,
        (settled, "shop.test", "Suppressed", "broadcast"): 1,
        (settled, "shop.test", "Delivery", "broadcast"): 1,
        (settled, "shop.test", "Bounce:hard", "broadcast"): 1,
        (settled, "shop.test", "Open", "broadcast"): 1,
        (settled, "shop.test", "Suppressed", "transactional"): 1,
        (settled, "shop.test", "Delivery", "transactional"): 1,
        (settled, "shop.test", "Complaint", "transactional"): 1,
    }
    summed: dict[tuple, int] = {}
    for (at, domain, kind, _), count in after.items():
        summed[at, domain, kind] = summed.get((at, domain, kind), 0) + count
    assert summed == before

    store(3, "broadcast", "news@shop.test", "d@x.test")
    with database.atomic():
        append_events([(news[0], "Click", later + 2, "{}"), (reset[0], "Open", later + 2, "{}")])
    _, counted = counts()
    assert counted[stored, "shop.test", "Injection", "broadcast"] == 4
    assert counted[settled, "shop.test", "Click", "broadcast"] == 1
    assert counted[settled, "shop.test", "Open", "transactional"] == 1
