"""Backup and restore (docs/deploy.md, "Backup and restore"): a backup taken with `layang db
backup` while mail flows restores into a new database, from which a worker delivers what was
queued; every message acknowledged before the backup reaches a receiver exactly once."""

from __future__ import annotations

import collections
import secrets
import shutil
import signal
import sqlite3
import subprocess
import sys

import pytest

from layang.models import Recipient
from tests.conftest import BACKENDS
from tests.delivery.test_crash import (
    ROOT,
    process_env,
    start,
    stop,
    wait_until,
    wait_while_running,
)
from tests.postgres.server import ADMIN_URL, query, unavailable, with_database
from tests.support.upstream import Upstream

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def submit(client, auth, subject):
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@sender.test"},
            "subject": subject,
            "to": [{"email": f"{subject}@rcpt.test"}],
            "bodyText": "hello",
        },
    )
    assert response.status_code == 200
    return subject


def restore(backend, backup, tmp_path):
    """A new database holding ``backup``, as docs/deploy.md says to restore one; its URL."""
    if backend == "sqlite":
        target = tmp_path / "restored.db"
        shutil.copyfile(backup, target)
        return f"sqlite:///{target}"
    if shutil.which("pg_restore") is None:
        unavailable("pg_restore is not installed (postgresql-client)")
    name = f"layang_restored_{secrets.token_hex(4)}"
    query(ADMIN_URL, f'CREATE DATABASE "{name}"')
    url = with_database(ADMIN_URL, name)
    subprocess.run(["pg_restore", "--no-owner", f"--dbname={url}", str(backup)], check=True)
    return url


def still_queued(url):
    sql = 'SELECT count(*) FROM "recipient" WHERE "next_attempt_at" IS NOT NULL'
    if url.startswith("sqlite:"):
        conn = sqlite3.connect(url.split(":///", 1)[1])
        try:
            return conn.execute(sql).fetchone()[0]
        finally:
            conn.close()
    return query(url, sql)[0][0]


def test_a_backup_taken_while_mail_flows_restores_and_delivers_each_message_once(
    backend, client, auth, config, upstream, tmp_path
):
    env = process_env(
        config, LAYANG_RELAY_URL=upstream.url, LAYANG_WORKER_CONNECTIONS=1, LAYANG_LEASE_SECONDS=3
    )
    upstream.slow_down(0.05)
    acknowledged = [submit(client, auth, f"m{n}") for n in range(40)]
    log = tmp_path / "primary.log"
    primary = start(["worker"], env, log)
    restored_url = None
    try:
        wait_while_running(
            lambda: len(upstream.received) >= 5, primary, log, "the primary delivered nothing"
        )
        # The primary is lost at the moment of the backup: what it has on the wire then is never
        # answered. Its records catch up with what the receiver answered before the backup.
        upstream.stall()
        assert upstream.wait_stalled(30)
        wait_until(
            lambda: (
                Recipient.select().where(Recipient.status == "Delivery").count()
                == len(upstream.received)
            ),
            30,
            "the primary did not record what it delivered",
        )
        backup_path = tmp_path / "layang.backup"
        taking = subprocess.Popen(
            [sys.executable, "-m", "layang", "db", "backup", str(backup_path)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        # Mail keeps coming in while the backup is taken.
        during = 0
        while taking.poll() is None or during < 3:
            submit(client, auth, f"during{during}")
            during += 1
        _, err = taking.communicate(timeout=60)
        assert taking.returncode == 0, err
        assert backup_path.stat().st_size > 0
        primary.send_signal(signal.SIGKILL)
        primary.wait(10)
    finally:
        stop(primary)
    delivered_by_primary = collections.Counter(r.message["Subject"] for r in upstream.received)
    assert 5 <= sum(delivered_by_primary.values()) < len(acknowledged)

    restored_url = restore(backend, backup_path, tmp_path)
    try:
        with Upstream() as second_upstream:
            env = process_env(
                config, LAYANG_DATABASE_URL=restored_url, LAYANG_RELAY_URL=second_upstream.url
            )
            log = tmp_path / "restored.log"
            restored = start(["worker"], env, log)
            try:
                wait_while_running(
                    lambda: still_queued(restored_url) == 0,
                    restored,
                    log,
                    "the restored worker did not deliver the queue",
                )
            finally:
                stop(restored)
            delivered_after = collections.Counter(
                r.message["Subject"] for r in second_upstream.received
            )
    finally:
        if backend == "postgresql":
            name = restored_url.rsplit("/", 1)[1]
            query(ADMIN_URL, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    overall = delivered_by_primary + delivered_after
    # Every message acknowledged before the backup arrived, once; those the primary had
    # delivered were not sent again.
    assert {subject: overall[subject] for subject in acknowledged} == dict.fromkeys(acknowledged, 1)
    assert not set(delivered_after) & set(delivered_by_primary)
    assert max(overall.values()) == 1
