"""Per-site state shared in the database: the adaptive throttle (AIMD), suspension after
connection failures, operator suspend/resume, session slots and the message rate, the last two
also across processes, on SQLite and on PostgreSQL."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import textwrap
import time

import pytest

from layang.clock import now_ms
from layang.destinations import sites
from layang.destinations.sites import Throttle
from layang.models import Recipient
from tests.conftest import BACKENDS
from tests.test_cli import ROOT

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

SITE = "mx1.a.example+mx2.a.example"
T0 = 1_800_000_000_000
GMAIL = "421 4.7.28 [203.0.113.9] Our system has detected an unusual rate of unsolicited mail"


@pytest.fixture
def db(app):
    """The test's database, opened with its schema."""
    return app


def test_slow_down_halves_the_limit_pauses_and_successes_win_it_back(db):
    assert sites.gate(SITE, 10, now=T0) == sites.SiteView(SITE, True, 10, "ok", None, None, None)
    view = sites.slow_down(SITE, GMAIL, 10, now=T0)
    assert (view.open, view.limit, view.state, view.until_ms) == (False, 5, "throttled", T0 + 5000)
    # The reason every account sees is in Layang's words: the codes, not the server's text.
    assert view.reason == "slow down: 421 4.7.28" and view.last_reply == GMAIL
    # Signals from other sessions within a second are the same signal.
    assert sites.slow_down(SITE, GMAIL, 10, now=T0 + 900).limit == 5
    assert sites.slow_down(SITE, GMAIL, 10, now=T0 + 999).until_ms == T0 + 5000
    assert not sites.gate(SITE, 10, now=T0 + 4999).open
    after = sites.gate(SITE, 10, now=T0 + 5000)
    assert (after.open, after.limit, after.state, after.until_ms) == (True, 5, "throttled", None)
    # Successes during the pause win nothing; after it, one session per second.
    assert sites.success(SITE, 10, now=T0 + 4000).limit == 5
    limits = [sites.success(SITE, 10, now=T0 + 5000 + 250 * i).limit for i in range(25)]
    assert limits[0] == 6 and limits[3] == 6 and limits[4] == 7
    assert limits[-1] == 10 and sorted(limits) == limits
    assert sites.gate(SITE, 10, now=T0 + 20_000).state == "ok"


def test_the_pause_doubles_while_the_signal_repeats_up_to_the_cap(db):
    throttle = Throttle(start_ms=5_000, max_ms=30_000)
    now, pauses, limits = T0, [], []
    for _ in range(6):
        view = sites.slow_down(SITE, GMAIL, 16, now=now, throttle=throttle)
        pauses.append(view.until_ms - now)
        limits.append(view.limit)
        now = view.until_ms + 100  # it says "slow down" again right after each pause
    assert pauses == [5_000, 10_000, 20_000, 30_000, 30_000, 30_000]
    assert limits == [8, 4, 2, 1, 1, 1]
    # Once the site stays quiet for longer than a pause, the next signal starts over.
    later = now + 120_000
    assert sites.slow_down(SITE, GMAIL, 16, now=later, throttle=throttle).until_ms == later + 5_000


def test_repeated_connection_failures_suspend_the_site_with_growing_backoff(db):
    refused = "connection refused by 192.0.2.1:25"
    assert sites.connect_failure(SITE, refused, 10, now=T0).open
    assert sites.connect_failure(SITE, refused, 10, now=T0 + 10).open
    view = sites.connect_failure(SITE, refused, 10, now=T0 + 20)
    assert (view.open, view.state, view.until_ms) == (False, "suspended", T0 + 5020)
    assert view.reason == "3 connection failures in a row (last: no reply)"
    now = T0 + 5100
    for _ in range(3):
        view = sites.connect_failure(SITE, refused, 10, now=now)
    assert view.until_ms == now + 10_000
    assert sites.gate(SITE, 10, now=now + 10_000).open
    # A success starts the count over.
    sites.connect_failure(SITE, refused, 10, now=now + 20_000)
    sites.success(SITE, 10, now=now + 20_001)
    sites.connect_failure(SITE, refused, 10, now=now + 20_002)
    assert sites.connect_failure(SITE, refused, 10, now=now + 20_003).open


def test_an_operator_suspends_and_resumes_a_site(db):
    view = sites.suspend(SITE, None, "suspended by the operator", now=T0)
    assert (view.open, view.state, view.until_ms) == (False, "suspended", None)
    assert not sites.gate(SITE, 10, now=T0 + 10**9).open
    assert sites.acquire_slot(SITE, "w1", 10, 60_000, now=T0) is None
    assert sites.resume(SITE, now=T0).open
    sites.suspend(SITE, T0 + 60_000, "maintenance", now=T0)
    assert not sites.gate(SITE, 10, now=T0 + 59_999).open
    assert sites.gate(SITE, 10, now=T0 + 60_000).state == "ok"


def test_the_queue_views_read_states_sessions_and_the_sites_holding_mail_back(db):
    other, quiet = "mx.other.example", "mx.quiet.example"
    sites.acquire_slot(SITE, "w1", 10, 60_000, now=T0)
    sites.acquire_slot(SITE, "w2", 10, 60_000, now=T0)
    sites.acquire_slot(quiet, "w1", 10, 1_000, now=T0)  # its lease runs out
    sites.slow_down(SITE, GMAIL, 10, now=T0)
    sites.suspend(other, None, "suspended by the operator", now=T0)

    assert sites.session_counts(now=T0 + 2_000) == {SITE: 2}
    # A site asked for is read; a throttled or suspended one is there unasked.
    views = sites.views([quiet], now=T0 + 2_000)
    assert set(views) == {SITE, other, quiet}
    assert (views[SITE].state, views[SITE].limit, views[SITE].last_reply) == (
        "throttled",
        5,
        GMAIL,
    )
    assert (views[other].state, views[other].until_ms, views[other].reason) == (
        "suspended",
        None,
        "suspended by the operator",
    )
    assert (views[quiet].state, views[quiet].limit, views[quiet].reason) == ("ok", 10, None)
    assert {view.site for view in sites.held_back(now=T0 + 2_000)} == {SITE, other}
    sites.resume(other, now=T0 + 3_000)
    assert [view.site for view in sites.held_back(now=T0 + 3_000)] == [SITE]


def test_slots_are_granted_in_batches_up_to_the_room_left(db):
    sites.acquire_slot(SITE, "w1", 5, 60_000, now=T0)
    granted = sites.acquire_slots(SITE, "w2", 5, 60_000, 10, now=T0 + 1)
    assert len(granted) == 4 == len(set(granted))
    assert sites.open_sessions(SITE, now=T0 + 1) == 5
    assert sites.acquire_slots(SITE, "w2", 5, 60_000, 3, now=T0 + 2) == []
    # Fewer than asked: the site is wanted by w2, so holders see a fair share is due.
    assert sites.fair_shares([SITE], "w1", now=T0 + 3) == {SITE: 5 // 2}
    # Expired slots are cleared on the way; a closed site grants none.
    assert len(sites.acquire_slots(SITE, "w3", 5, 60_000, 9, now=T0 + 61_000)) == 5
    sites.suspend(SITE, None, "maintenance", now=T0 + 61_001)
    assert sites.acquire_slots(SITE, "w4", 5, 60_000, 2, now=T0 + 130_000) == []


def test_slots_hold_the_limit_and_dead_owners_lose_theirs(db):
    held = [sites.acquire_slot(SITE, "w1", 3, 1_000, now=T0) for _ in range(4)]
    assert held[3] is None and all(held[:3])
    assert sites.open_sessions(SITE, now=T0) == 3
    sites.release_slot(held[0])
    assert sites.acquire_slot(SITE, "w2", 3, 1_000, now=T0) is not None
    # w2 renews; w1 dies: its slots stop counting when their lease ends.
    assert sites.renew_slots("w2", 5_000, now=T0 + 500) == 1
    assert sites.open_sessions(SITE, now=T0 + 1_000) == 1
    assert len([sites.acquire_slot(SITE, "w3", 3, 60_000, now=T0 + 1_000) for _ in range(2)]) == 2
    assert sites.acquire_slot(SITE, "w3", 3, 1_000, now=T0 + 1_000) is None
    # A throttled site's lower limit applies to new slots.
    sites.slow_down(SITE, GMAIL, 3, now=T0 + 1_000)
    assert sites.acquire_slot(SITE, "w3", 3, 1_000, now=T0 + 7_000) is None  # 3 held > 1
    assert sites.gate(SITE, now=T0 + 7_000).limit == 1


def test_a_process_refused_a_slot_gets_a_fair_share_from_the_holders(db):
    now = now_ms()
    held = [sites.acquire_slot(SITE, "a", 4, 60_000, now=now) for _ in range(4)]
    assert all(held)
    assert sites.fair_shares([SITE], "a", now=now) == {}  # nobody else wants it
    assert sites.acquire_slot(SITE, "b", 4, 60_000, now=now) is None
    # "a" learns that its share is half the site while "b" waits; "b" is told nothing.
    assert sites.fair_shares([SITE], "a", now=now + 100) == {SITE: 2}
    assert sites.fair_shares([SITE], "b", now=now + 100) == {}
    sites.release_slots(held[:2])
    assert sites.acquire_slot(SITE, "b", 4, 60_000, now=now + 200)
    # The want lapses once nobody has been refused for a while.
    assert sites.fair_shares([SITE], "a", now=now + 200 + sites.WANTED_MS) == {}


def test_the_rate_spaces_sends_evenly(db):
    now = T0 * 1000
    waits = [sites.take_rate(SITE, 10.0, now_us=now) for _ in range(5)]
    assert waits == [0.0, 0.1, 0.2, 0.3, 0.4]
    assert sites.take_rate(SITE, 10.0, now_us=now + 2_000_000) == 0.0


CONTENDER = textwrap.dedent(
    """
    import json, sys, time
    from layang.db import open_database
    from layang.destinations import sites
    open_database(sys.argv[1])
    owner, most, reserved = sys.argv[2], 0, []
    start = float(sys.argv[3])  # the same moment for every contender, whenever it got here
    while time.time() < start:
        time.sleep(0.001)
    for _ in range(40):
        slot = sites.acquire_slot("shared.example", owner, 3, 60_000)
        if slot:
            most = max(most, sites.open_sessions("shared.example"))
            time.sleep(0.002)
            sites.release_slot(slot)
    for _ in range(15):
        now = time.time()
        reserved.append(now + sites.take_rate("rated.example", 50.0, now_us=int(now * 1e6)))
    print(json.dumps({"most": most, "reserved": reserved}))
    """
)


def test_two_processes_share_one_limit_and_one_rate(db, config):
    start = time.time() + 5  # after every contender's start-up, even on a loaded machine
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", CONTENDER, config.database_url, f"w{i}", str(start)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(3)
    ]
    results = []
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        results.append(json.loads(out))
    assert max(r["most"] for r in results) <= 3
    assert max(r["most"] for r in results) >= 2  # they did overlap
    times = sorted(t for r in results for t in r["reserved"])
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # 45 sends at 50/s across three processes: never two in the same 20 ms (clock skew aside).
    assert min(gaps) > 0.015 and times[-1] - times[0] >= 44 * 0.02 - 0.01


def test_resuming_a_site_makes_the_mail_waiting_on_it_due_at_once(client, auth):
    response = client.post(
        "/v1/layang/transmissions",
        headers=auth,
        json={
            "from": {"email": "shop@acme.test"},
            "subject": "Hi",
            "to": [{"email": f"r{i}@a.example"} for i in range(3)] + [{"email": "r@b.example"}],
            "bodyText": "hi",
        },
    )
    assert response.status_code == 200
    later = now_ms() + 60_000
    # The engine hands mail back to wait on a closed site this way (docs/delivery.md).
    Recipient.update(waiting_on=SITE, next_attempt_at=later).where(
        Recipient.domain == "a.example"
    ).execute()
    Recipient.update(waiting_on="mx.b.example", next_attempt_at=later).where(
        Recipient.domain == "b.example"
    ).execute()
    sites.suspend(SITE, None, "suspended by the operator")
    assert not sites.gate(SITE).open

    view = sites.resume(SITE)

    assert (view.open, view.state, view.reason) == (True, "ok", None)
    due = {r.address: r.next_attempt_at <= now_ms() for r in Recipient.select()}
    assert due == {
        "r0@a.example": True,
        "r1@a.example": True,
        "r2@a.example": True,
        "r@b.example": False,
    }


def test_a_sites_shown_reason_holds_only_the_codes_of_a_reply(db):
    yahoo = "421 4.7.0 [TSS04] Messages from 192.0.2.1 deferred"
    assert sites.reply_codes(yahoo) == "421 4.7.0"
    assert sites.reply_codes("451-4.7.500 Server busy for bo@tenant.example") == "451 4.7.500"
    assert sites.reply_codes("421 mx.example closing: too many sessions from you") == "421"
    assert sites.reply_codes("connection to 192.0.2.1:25 refused") == "no reply"
