"""What the worker clears away besides retention's history: expired keys, windows, counters."""

from __future__ import annotations

from layang.clock import now_ms
from layang.ids import id_floor, new_id
from layang.lifecycle import housekeeping

DAY_MS = 86_400_000


def test_an_id_floor_sorts_between_the_ids_made_before_and_at_its_time():
    made = new_id()
    assert id_floor(now_ms() - 1) < made < id_floor(now_ms() + 1000)


def test_breaker_counters_older_than_their_window_go(app, account):
    from layang.mail.reputation import BUCKET_MS, WINDOW_MS, bucket_of
    from layang.models import BreakerCount

    now = now_ms()
    for bucket in (bucket_of(now), bucket_of(now - WINDOW_MS - BUCKET_MS)):
        BreakerCount.create(account=account.id, domain="", bucket=bucket, sent=1)
    housekeeping.delete_expired(now)
    assert [row.bucket for row in BreakerCount.select()] == [bucket_of(now)]
