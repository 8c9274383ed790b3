"""The overview: what an account's mail did over the last 24 hours, 7 days or 30 days, by kind
of event, by stream, by sending domain, against the mailbox providers' thresholds; what waits
in the queue; and what needs the account's attention. Everything but the streams' own totals
can be narrowed to one stream.

The figures count events (docs/api.md, "The overview"): an email that got a ``Delivery`` counts as
delivered even when a ``Complaint`` followed. They come from ``activity_count``, which the
database keeps as recipients and events are stored (the ``activity_count_sent`` and
``activity_count_event`` triggers, docs/schema.sql), so each chart is one aggregate query over a
few hundred rows, however many records the account has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from peewee import fn

from layang.clock import now_ms
from layang.config import Config
from layang.db import database, is_postgresql
from layang.domain import breaker, queue_view, sending_domains
from layang.mail.bounce_class import BOUNCE_CLASSES
from layang.models import (
    BOUNCE,
    CLICK,
    COMPLAINT,
    DELAY,
    DELIVERY,
    INJECTION,
    OPEN,
    STREAM_PRIORITY,
    STREAMS,
    VERIFIED,
    Account,
    ActivityCount,
    ActivityTagCount,
    WebhookEndpoint,
)

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


@dataclass(frozen=True)
class Period:
    key: str
    label: str
    span_ms: int
    step_ms: int  # one point of the chart


PERIODS = {
    "24h": Period("24h", "last 24 hours", DAY_MS, HOUR_MS),
    "7d": Period("7d", "last 7 days", 7 * DAY_MS, 6 * HOUR_MS),
    "30d": Period("30d", "last 30 days", 30 * DAY_MS, DAY_MS),
}
DEFAULT_PERIOD = "7d"

# (key, label, the counted kinds)
ACTIVITY_SERIES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("sent", "Sent", (INJECTION,)),
    ("delivered", "Delivered", (DELIVERY,)),
    ("deferred", "Deferred", (DELAY,)),
    ("bounced", "Bounced", tuple(f"{BOUNCE}:{c}" for c in BOUNCE_CLASSES)),
    ("complained", "Complaints", (COMPLAINT,)),
    ("opened", "Opens", (OPEN,)),
    ("clicked", "Clicks", (CLICK,)),
)
BOUNCE_SERIES = tuple((c, c.capitalize(), (f"{BOUNCE}:{c}",)) for c in BOUNCE_CLASSES)

# The large mailbox providers' limits (Gmail's and Yahoo's bulk sender rules): complaints
# under 0.3 % of delivered mail, 0.1 % as the target; bounces alarm at 5 % and harm at 10 %.
BOUNCE_WARN, BOUNCE_LIMIT = 0.05, 0.10
COMPLAINT_WARN, COMPLAINT_LIMIT = 0.001, 0.003


@dataclass(frozen=True)
class Series:
    key: str
    label: str
    values: tuple[int, ...]

    @property
    def total(self) -> int:
        return sum(self.values)


@dataclass(frozen=True)
class Rate:
    """``numerator / denominator`` against a warning and a limit (None: no threshold)."""

    key: str
    label: str
    numerator: int
    denominator: int
    warn: float | None
    limit: float | None
    higher_is_better: bool = False

    @property
    def value(self) -> float | None:
        return self.numerator / self.denominator if self.denominator else None

    @property
    def standing(self) -> str:
        """``ok``, ``warn`` or ``bad`` against the thresholds; ``none`` without mail."""
        value = self.value
        if value is None:
            return "none"
        if self.limit is not None and value >= self.limit:
            return "bad"
        if self.warn is not None and value >= self.warn:
            return "warn"
        return "ok"


@dataclass(frozen=True)
class Chart:
    """Points from ``starts[0]`` on, one each ``period.step_ms``; the last may be partial."""

    period: Period
    starts: tuple[int, ...]
    series: tuple[Series, ...]

    def total(self, key: str) -> int:
        return next(s.total for s in self.series if s.key == key)


def _rates(totals: dict[str, int]) -> tuple[Rate, ...]:
    sent, delivered = totals.get("sent", 0), totals.get("delivered", 0)
    return (
        Rate("delivery", "Delivery rate", delivered, sent, None, None, higher_is_better=True),
        Rate("bounce", "Bounce rate", totals.get("bounced", 0), sent, BOUNCE_WARN, BOUNCE_LIMIT),
        Rate(
            "complaint",
            "Complaint rate",
            totals.get("complained", 0),
            delivered,
            COMPLAINT_WARN,
            COMPLAINT_LIMIT,
        ),
    )


@dataclass(frozen=True, kw_only=True)
class Totals:
    """What a part of the period's mail (a sending domain's, a stream's) did, in all."""

    sent: int = 0
    delivered: int = 0
    deferred: int = 0
    bounced: int = 0
    complained: int = 0
    opened: int = 0
    clicked: int = 0

    @property
    def rates(self) -> tuple[Rate, ...]:
        return _rates(
            {
                "sent": self.sent,
                "delivered": self.delivered,
                "bounced": self.bounced,
                "complained": self.complained,
            }
        )


@dataclass(frozen=True, kw_only=True)
class DomainFigures(Totals):
    domain: str


@dataclass(frozen=True, kw_only=True)
class StreamFigures(Totals):
    stream: str


@dataclass(frozen=True, kw_only=True)
class TagFigures(Totals):
    tag: str


@dataclass(frozen=True)
class Activity:
    """The period's events over time, its bounces by class, its totals per sending domain
    (busiest first), and the rates of its totals: of one ``stream`` when it is set, else of
    all. ``streams`` holds every stream's totals (in ``STREAMS`` order) either way."""

    chart: Chart
    bounces: Chart
    domains: tuple[DomainFigures, ...]
    streams: tuple[StreamFigures, ...]
    stream: str | None = None

    @property
    def rates(self) -> tuple[Rate, ...]:
        return _rates({s.key: s.total for s in self.chart.series})


def _first_point(period: Period, now: int) -> int:
    # Points start on whole steps (UTC), the newest holding now.
    return (now // period.step_ms + 1) * period.step_ms - period.span_ms


def activity(
    account: Account, period: Period, now: int | None = None, stream: str | None = None
) -> Activity:
    """The account's events in ``period`` (ending now), by point, sending domain, stream and
    kind: one query, read into every chart and table of the period, of ``stream`` alone when
    it is one of ``STREAMS``. Raises ``ValueError`` for another stream."""
    if stream is not None and stream not in STREAMS:
        raise ValueError(f"{stream!r} is not a stream")
    now = now_ms() if now is None else now
    start = _first_point(period, now)
    points = period.span_ms // period.step_ms
    bucket = (ActivityCount.hour - start) / period.step_ms
    columns = (bucket, ActivityCount.domain, ActivityCount.stream, ActivityCount.kind)
    rows = (
        ActivityCount.select(*columns, fn.SUM(ActivityCount.count))
        .where((ActivityCount.account == account.id) & (ActivityCount.hour >= start))
        .group_by(*columns)
        .tuples()
    )
    counts: dict[str, list[int]] = {}
    kinds_of = {kind: key for key, _, kinds in ACTIVITY_SERIES for kind in kinds}
    per_domain: dict[str, dict[str, int]] = {}
    per_stream: dict[str, dict[str, int]] = {name: {} for name in STREAMS}
    for point, domain, row_stream, kind, count in rows:
        point, count = int(point), int(count)
        if not 0 <= point < points:
            continue
        key = kinds_of.get(kind)
        if key is not None:
            figures = per_stream.setdefault(row_stream, {})
            figures[key] = figures.get(key, 0) + count
        if stream is not None and row_stream != stream:
            continue
        counts.setdefault(kind, [0] * points)[point] += count
        if key is not None:
            figures = per_domain.setdefault(domain, {})
            figures[key] = figures.get(key, 0) + count

    def series(spec: tuple[tuple[str, str, tuple[str, ...]], ...]) -> tuple[Series, ...]:
        made = []
        for key, label, kinds in spec:
            values = [0] * points
            for kind in kinds:
                for i, count in enumerate(counts.get(kind, ())):
                    values[i] += count
            made.append(Series(key, label, tuple(values)))
        return tuple(made)

    domains = [DomainFigures(domain=domain, **figures) for domain, figures in per_domain.items()]
    starts = tuple(start + i * period.step_ms for i in range(points))
    return Activity(
        chart=Chart(period, starts, series(ACTIVITY_SERIES)),
        bounces=Chart(period, starts, series(BOUNCE_SERIES)),
        domains=tuple(sorted(domains, key=lambda f: (-f.sent, f.domain))),
        streams=tuple(StreamFigures(stream=name, **per_stream[name]) for name in STREAMS),
        stream=stream,
    )


def tag_figures(account: Account, period: Period, now: int | None = None) -> tuple[TagFigures, ...]:
    """The totals of the account's tagged mail in ``period`` (ending now), per tag, busiest
    first (then by tag), every stream together: read from the counts the database's triggers
    keep per tag (``ActivityTagCount``), as :func:`activity` reads its own."""
    now = now_ms() if now is None else now
    start = _first_point(period, now)
    rows = (
        ActivityTagCount.select(
            ActivityTagCount.tag, ActivityTagCount.kind, fn.SUM(ActivityTagCount.count)
        )
        .where((ActivityTagCount.account == account.id) & (ActivityTagCount.hour >= start))
        .group_by(ActivityTagCount.tag, ActivityTagCount.kind)
        .tuples()
    )
    kinds_of = {kind: key for key, _, kinds in ACTIVITY_SERIES for kind in kinds}
    per_tag: dict[str, dict[str, int]] = {}
    for tag, kind, count in rows:
        key = kinds_of.get(kind)
        if key is not None:
            figures = per_tag.setdefault(tag, {})
            figures[key] = figures.get(key, 0) + int(count)
    made = [TagFigures(tag=tag, **figures) for tag, figures in per_tag.items()]
    return tuple(sorted(made, key=lambda f: (-f.sent, f.tag)))


# -- the queue ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Waiting:
    """Mail waiting for one destination. ``state`` says how the destination is being treated
    when something shapes it (a throttled or suspended site); empty while mail simply waits."""

    destination: str
    waiting: int
    deferred: int  # of them, tried at least once
    oldest_at: int
    next_attempt_at: int | None
    state: str = ""


def _address_domain() -> str:
    if is_postgresql():
        return "lower(regexp_replace(\"address\", '^.*@', ''))"
    kept = "rtrim(\"address\", replace(\"address\", '@', ''))"
    return f'lower(substr("address", length({kept}) + 1))'


# Only mail still due an attempt has a next attempt: the index on it holds just the queue.
# SQLite's planner, from statistics that count every delivered record, would scan the table
# instead, so it is told.
_QUEUE_INDEX = 'INDEXED BY "recipient_next_attempt_at"'

WAITING_SHOWN = 20


def waiting_by_destination(
    account: Account, limit: int = WAITING_SHOWN, stream: str | None = None
) -> tuple[Waiting, ...]:
    """The account's queued mail (of ``stream`` alone when given) by recipient domain, most
    waiting first: one query over the recipients still due an attempt."""
    destination = _address_domain()
    param = database.obj.param
    index = "" if is_postgresql() else _QUEUE_INDEX
    of_stream, params = "", [DELAY, account.id]
    if stream is not None:
        of_stream = f'AND "priority" = {param} '
        params.append(STREAM_PRIORITY[stream])
    cursor = database.execute_sql(
        f"SELECT {destination} AS destination, count(*), "  # noqa: S608 - no values
        f'sum(CASE WHEN "status" = {param} THEN 1 ELSE 0 END), '
        f'min("created_at"), min("next_attempt_at") FROM "recipient" {index} '
        f'WHERE "next_attempt_at" IS NOT NULL AND "account_id" = {param} {of_stream}'
        f"GROUP BY destination ORDER BY count(*) DESC, destination LIMIT {int(limit)}",
        params,
    )
    rows = cursor.fetchall()
    # Direct to MX: a domain whose site is throttled or suspended says so (one small query
    # when no site is, the usual case).
    held = {item.domain: item for item in queue_view.account_attention(account.id)}
    return tuple(
        Waiting(
            row[0],
            int(row[1]),
            int(row[2] or 0),
            int(row[3]),
            row[4],
            _held_state(held.get(row[0])),
        )
        for row in rows
    )


def _held_state(item: queue_view.DomainQueue | None) -> str:
    if item is None:
        return ""
    return f"{item.state} ({item.site})" + (f": {item.reason}" if item.reason else "")


# -- what needs attention -----------------------------------------------------------------------


@dataclass(frozen=True)
class Notice:
    """One thing the account should look at. ``page`` names the console page that fixes it
    (``webhooks``, ``domains``, …)."""

    severity: str  # "bad" | "warn"
    title: str
    detail: str
    page: str


def failing_webhooks(account: Account, config: Config) -> Iterable[Notice]:
    rows = WebhookEndpoint.select().where(
        (WebhookEndpoint.account == account.id)
        & (
            WebhookEndpoint.disabled_at.is_null(False)
            | WebhookEndpoint.failing_since.is_null(False)
        )
    )
    for row in rows.order_by(WebhookEndpoint.id):
        if row.disabled_at is not None:
            yield Notice(
                "bad",
                f"Webhook endpoint {row.url} is disabled",
                row.disabled_reason or "",
                "webhooks",
            )
        else:
            yield Notice(
                "warn",
                f"Webhook endpoint {row.url} is failing",
                "Its requests have failed since the time shown on the Webhooks page; "
                "they are retried.",
                "webhooks",
            )


def unverified_domains(account: Account, config: Config) -> Iterable[Notice]:
    for state in sending_domains.list_domains(account, config, limit=100).items:
        if state.status != VERIFIED:
            yield Notice(
                "warn",
                f"{state.domain} is not verified",
                "Publish its DNS records, then press Verify.",
                "domains",
            )


def missing_dns_records(account: Account, config: Config) -> Iterable[Notice]:
    for state in sending_domains.list_domains(account, config, limit=100).items:
        if state.checked_at is None:
            continue  # never checked: "not verified" says it
        wrong = [r for r in state.records if r.status != sending_domains.OK]
        if wrong:
            names = ", ".join(f"{r.purpose.upper()} ({r.status})" for r in wrong)
            yield Notice(
                "warn",
                f"{state.domain}: DNS records missing or wrong",
                f"{names}, as of the last check.",
                "domains",
            )


def paused_streams(account: Account, config: Config) -> Iterable[Notice]:
    """The circuit breaker's warnings and pauses (broadcast mail refused while paused)."""
    for standing in breaker.standings(account, config):
        paused = standing.level >= breaker.PAUSED
        yield Notice(
            "bad" if paused else "warn",
            f"Broadcast sending is paused for {standing.scope}"
            if paused
            else f"Reputation warning for {standing.scope}",
            standing.reason
            + (" Resume with `layang accounts resume` once the list is cleaned." if paused else ""),
            "overview",
        )


def throttled_sites(account: Account, config: Config) -> Iterable[Notice]:
    """Recipient domains whose mail waits on a throttled or suspended site."""
    for item in queue_view.account_attention(account.id):
        yield Notice(
            "warn",
            f"Mail to {item.domain} waits: {item.site} is {item.state}",
            item.reason or "",
            "queue",
        )


# Each check adds what it finds; a new concern is one more function here.
ATTENTION_CHECKS: list[Callable[[Account, Config], Iterable[Notice]]] = [
    failing_webhooks,
    unverified_domains,
    missing_dns_records,
    paused_streams,
    throttled_sites,
]


def needs_attention(account: Account, config: Config) -> tuple[Notice, ...]:
    """Every check's notices, the serious first."""
    found = [notice for check in ATTENTION_CHECKS for notice in check(account, config)]
    return tuple(sorted(found, key=lambda n: n.severity != "bad"))
