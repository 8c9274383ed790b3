"""Claiming on PostgreSQL: concurrent claimers skip each other's rows, leases hand work over."""

from __future__ import annotations

import logging
import threading
import time

from layang.db import database
from layang.delivery.queue import RECIPIENTS, claim_due_recipients
from layang.models import Recipient


def test_concurrent_claimers_never_share_a_row(queue_many):
    queue_many(400)
    start = threading.Barrier(6)
    claims: dict[str, list[str]] = {}
    errors: list[BaseException] = []

    def claimer(owner: str) -> None:
        mine = claims.setdefault(owner, [])
        try:
            start.wait()
            while batch := claim_due_recipients(owner, 7, lease_seconds=60):
                mine.extend(r.id for r in batch)
        except BaseException as error:  # reported below, from the main thread
            errors.append(error)
        finally:
            database.close()

    threads = [threading.Thread(target=claimer, args=(f"w{n}",)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    every = [rid for ids in claims.values() for rid in ids]
    assert len(every) == len(set(every)) == 400
    assert sum(1 for ids in claims.values() if ids) > 1  # they really competed
    held = {r.id: r.lease_owner for r in Recipient.select()}
    for owner, ids in claims.items():
        assert all(held[rid] == owner for rid in ids)


def test_claim_skips_locked_rows(queue_many, caplog):
    queue_many(3)
    caplog.set_level(logging.DEBUG, logger="peewee")
    claim_due_recipients("w1", 10, lease_seconds=60)
    statements = [str(r.msg) for r in caplog.records if r.name == "peewee"]
    assert any("FOR UPDATE SKIP LOCKED" in s for s in statements), statements


def test_expired_lease_is_taken_over_and_released_leases_come_back(queue_many):
    queue_many(4)
    first = claim_due_recipients("dead", 2, lease_seconds=0.2)
    assert len(first) == 2
    second = claim_due_recipients("alive", 10, lease_seconds=60)
    assert {r.id for r in second}.isdisjoint(r.id for r in first)
    assert len(second) == 2
    time.sleep(0.3)
    taken_over = claim_due_recipients("alive", 10, lease_seconds=60)
    assert {r.id for r in taken_over} == {r.id for r in first}
    assert RECIPIENTS.release("alive") == 4
    assert len(claim_due_recipients("next", 10, lease_seconds=60)) == 4
