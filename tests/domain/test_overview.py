"""The overview's figures: counted by the database as recipients and events are stored, read
back per period, per point, per sending domain and per stream, on both backends."""

from __future__ import annotations

import json

import pytest

from layang.db import write_transaction
from layang.domain import overview
from layang.mail.events import append_events
from layang.models import BROADCAST, STREAM_PRIORITY, TRANSACTIONAL, Recipient, Transmission
from tests.conftest import BACKENDS

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

HOUR = overview.HOUR_MS
NOW = 1_764_000_000_000 + 30 * 60_000  # half past an hour
THIS_HOUR = NOW // HOUR * HOUR


def _mail(
    account,
    sender: str,
    at: int,
    *addresses: str,
    status: str = "Injection",
    stream: str = TRANSACTIONAL,
) -> list[str]:
    with write_transaction():
        sent = Transmission.create(
            account=account.id,
            created_at=at,
            mail_from=sender,
            from_header=json.dumps({"email": sender}),
            message_id=f"<{at}-{stream}@test>",
            stream=stream,
        )
        return [
            Recipient.create(
                transmission=sent,
                account=account.id,
                address=address,
                recipient_type="to",
                status=status,
                created_at=at,
                next_attempt_at=at if status == "Injection" else None,
                priority=STREAM_PRIORITY[stream],
            ).id
            for address in addresses
        ]


def _events(*rows: tuple[str, str, int, dict]) -> None:
    with write_transaction():
        append_events([(rid, status, at, json.dumps(detail)) for rid, status, at, detail in rows])


def test_figures_by_period_point_and_domain(account):
    an_hour_ago, two_days_ago = NOW - HOUR, NOW - 48 * HOUR
    a, b = _mail(account, "shop@Acme.TEST", an_hour_ago, "x@one.test", "y@one.test")
    (c,) = _mail(account, "news@mail.acme.test", two_days_ago, "z@Two.test")
    _mail(account, "shop@acme.test", NOW, "gone@one.test", status="Suppressed")
    _events(
        (a, "Delivery", an_hour_ago + 1, {}),
        (b, "Delay", an_hour_ago + 1, {"bounceClass": "soft"}),
        (b, "Bounce", NOW - 1, {"bounceClass": "hard", "reply": "550 5.1.1"}),
        (c, "Bounce", two_days_ago + 1, {}),
        (a, "Open", NOW, {}),
        (a, "Complaint", NOW, {}),
    )

    day = overview.activity(account, overview.PERIODS["24h"], now=NOW)
    assert day.chart.starts[-1] == THIS_HOUR and len(day.chart.starts) == 24
    totals = {s.key: s.total for s in day.chart.series}
    assert totals == {
        "sent": 2,
        "delivered": 1,
        "deferred": 1,
        "bounced": 1,
        "complained": 1,
        "opened": 1,
        "clicked": 0,
    }
    sent = next(s for s in day.chart.series if s.key == "sent")
    assert sent.values[-2:] == (2, 0)  # in the hour before this one
    assert {s.key: s.total for s in day.bounces.series}["hard"] == 1
    bounce, complaint = day.rates[1], day.rates[2]
    assert (bounce.value, bounce.standing) == (0.5, "bad")
    assert (complaint.numerator, complaint.denominator, complaint.standing) == (1, 1, "bad")

    week = overview.activity(account, overview.PERIODS["7d"], now=NOW)
    assert week.chart.total("sent") == 3 and week.bounces.series[-1].total == 1  # undetermined
    assert [(d.domain, d.sent, d.delivered, d.bounced) for d in week.domains] == [
        ("acme.test", 2, 1, 1),
        ("mail.acme.test", 1, 0, 1),
    ]

    waiting = overview.waiting_by_destination(account)
    assert [(w.destination, w.waiting, w.deferred) for w in waiting] == [
        ("one.test", 2, 0),
        ("two.test", 1, 0),
    ]


def test_figures_by_stream_all_or_one(account):
    an_hour_ago = NOW - HOUR
    reset, receipt = _mail(account, "id@acme.test", an_hour_ago, "a@one.test", "b@two.test")
    news = _mail(
        account, "news@acme.test", an_hour_ago, "c@one.test", "d@one.test", "e@one.test",
        stream=BROADCAST,
    )  # fmt: skip
    _mail(account, "news@acme.test", NOW, "gone@one.test", status="Suppressed", stream=BROADCAST)
    _events(
        (reset, "Delivery", an_hour_ago + 1, {}),
        (receipt, "Bounce", an_hour_ago + 1, {"bounceClass": "block"}),
        (news[0], "Delivery", an_hour_ago + 1, {}),
        (news[1], "Delivery", an_hour_ago + 1, {}),
        (news[2], "Bounce", an_hour_ago + 1, {"bounceClass": "hard"}),
        (news[0], "Open", NOW, {}),
        (news[0], "Click", NOW, {}),
        (news[1], "Complaint", NOW, {}),
    )
    period = overview.PERIODS["24h"]

    every = overview.activity(account, period, now=NOW)
    assert every.stream is None and every.chart.total("sent") == 5
    transactional, broadcast = every.streams
    assert (transactional.stream, transactional.sent, transactional.delivered) == (
        TRANSACTIONAL, 2, 1
    )  # fmt: skip
    assert (transactional.bounced, transactional.complained, transactional.opened) == (1, 0, 0)
    assert (broadcast.stream, broadcast.sent, broadcast.delivered, broadcast.bounced) == (
        BROADCAST, 3, 2, 1
    )  # fmt: skip
    assert (broadcast.complained, broadcast.opened, broadcast.clicked) == (1, 1, 1)
    assert [r.value for r in broadcast.rates] == [2 / 3, 1 / 3, 1 / 2]
    for series in every.chart.series:  # the streams add up to the whole
        assert series.total == sum(getattr(s, series.key) for s in every.streams)

    news_only = overview.activity(account, period, now=NOW, stream=BROADCAST)
    assert news_only.stream == BROADCAST and news_only.streams == every.streams
    assert {s.key: s.total for s in news_only.chart.series} == {
        "sent": 3,
        "delivered": 2,
        "deferred": 0,
        "bounced": 1,
        "complained": 1,
        "opened": 1,
        "clicked": 1,
    }
    assert {s.key: s.total for s in news_only.bounces.series}["hard"] == 1
    assert [(d.domain, d.sent) for d in news_only.domains] == [("acme.test", 3)]
    assert [r.value for r in news_only.rates] == [2 / 3, 1 / 3, 1 / 2]
    resets = overview.activity(account, period, now=NOW, stream=TRANSACTIONAL)
    assert {s.key: s.total for s in resets.bounces.series}["block"] == 1
    assert resets.chart.total("sent") == 2 and resets.chart.total("opened") == 0
    with pytest.raises(ValueError, match="'bulk' is not a stream"):
        overview.activity(account, period, now=NOW, stream="bulk")

    waiting = {
        stream: [(w.destination, w.waiting) for w in overview.waiting_by_destination(
            account, stream=stream
        )]
        for stream in (None, TRANSACTIONAL, BROADCAST)
    }  # fmt: skip
    assert waiting == {
        None: [("one.test", 4), ("two.test", 1)],
        TRANSACTIONAL: [("one.test", 1), ("two.test", 1)],
        BROADCAST: [("one.test", 3)],
    }


def test_an_empty_account_has_zero_figures_and_no_rates(account):
    month = overview.activity(account, overview.PERIODS["30d"], now=NOW)
    assert len(month.chart.starts) == 30 and all(s.total == 0 for s in month.chart.series)
    assert all(r.value is None and r.standing == "none" for r in month.rates)
    assert month.domains == ()
    assert [(s.stream, s.sent) for s in month.streams] == [(TRANSACTIONAL, 0), (BROADCAST, 0)]


def test_what_needs_attention(account, config):
    from layang.domain import sending_domains, webhooks
    from layang.models import WebhookEndpoint

    assert overview.needs_attention(account, config) == ()
    failing = webhooks.create_endpoint(account, "https://hooks.example.com/a", ["*"], "", config)
    off = webhooks.create_endpoint(account, "https://hooks.example.com/b", ["*"], "", config)
    webhooks.create_endpoint(account, "https://hooks.example.com/fine", ["*"], "", config)
    WebhookEndpoint.update(failing_since=NOW).where(WebhookEndpoint.id == failing.id).execute()
    webhooks.set_enabled(account, off.id, False, "Failing for 5 days.")
    sending_domains.create_domain(account, "shop.example", None, config)

    notices = overview.needs_attention(account, config)
    assert [(n.severity, n.title, n.page) for n in notices] == [
        ("bad", "Webhook endpoint https://hooks.example.com/b is disabled", "webhooks"),
        ("warn", "Webhook endpoint https://hooks.example.com/a is failing", "webhooks"),
        ("warn", "shop.example is not verified", "domains"),
    ]
    assert notices[0].detail == "Failing for 5 days."


def test_mail_held_by_a_suspended_site_is_shown_and_needs_attention(account, config):
    from layang.destinations import sites
    from layang.destinations.mx import remember_sites

    _mail(account, "shop@sender.test", NOW, "a@held.example", "b@held.example")
    Recipient.update(domain="held.example").execute()
    remember_sites([("held.example", "mx.held.example", NOW + HOUR * 24 * 365 * 10)])
    assert [w.state for w in overview.waiting_by_destination(account)] == [""]
    sites.suspend("mx.held.example", None, "operator: maintenance")
    (waiting,) = overview.waiting_by_destination(account)
    assert waiting.destination == "held.example"
    assert waiting.state == "suspended (mx.held.example): operator: maintenance"
    (notice,) = overview.needs_attention(account, config)
    assert (notice.title, notice.page) == (
        "Mail to held.example waits: mx.held.example is suspended",
        "queue",
    )
