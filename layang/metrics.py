"""Prometheus metrics.

Totals (emails accepted, delivery events by status) and queue figures are read from the database
at scrape time, so every API process answers ``/metrics`` with the same numbers however many
processes accept and deliver mail. The relay latency histogram is measured where mail is sent, in
each worker process, and is exposed by that process (``LAYANG_WORKER_METRICS_BIND``; in
``layang run`` by the API's ``/metrics`` too).
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
from collections.abc import Iterable
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import peewee
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from layang.clock import now_ms
from layang.db import UNAVAILABLE_ERRORS, discard_connection, error_summary, write_health
from layang.models import (
    BOUNCE,
    DELAY,
    DELIVERY,
    Event,
    MxDomain,
    Recipient,
    SiteSlot,
    SiteState,
)

log = logging.getLogger("layang.metrics")

ACCEPTED = ("layang_messages_accepted", "Emails accepted (one per recipient).")
# The counters read from the activity events: name, help, the event status each one counts.
EVENT_COUNTERS = (
    ("layang_messages_delivered", "Emails the recipient's server accepted.", DELIVERY),
    ("layang_messages_delayed", "Delivery attempts that failed temporarily.", DELAY),
    ("layang_messages_bounced", "Emails that failed permanently or expired.", BOUNCE),
)
RELAY_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

# Measurements made by this process; only what the process actually measured is registered, so an
# API process does not report an always-empty relay histogram.
PROCESS_REGISTRY = CollectorRegistry()
_relay_latency: Histogram | None = None
_recorded_outcomes: Counter | None = None
_relay_lock = threading.Lock()


def relay_latency() -> Histogram:
    """This process's relay latency histogram (seconds per SMTP transaction), registered on use."""
    global _relay_latency
    if _relay_latency is None:
        with _relay_lock:
            if _relay_latency is None:
                _relay_latency = Histogram(
                    "layang_relay_latency_seconds",
                    "Time to relay one message to the upstream server (per worker process).",
                    buckets=RELAY_LATENCY_BUCKETS,
                    registry=PROCESS_REGISTRY,
                )
    return _relay_latency


def recorded_outcomes() -> Counter:
    """This process's count of recorded delivery outcomes by status, registered on use."""
    global _recorded_outcomes
    if _recorded_outcomes is None:
        with _relay_lock:
            if _recorded_outcomes is None:
                _recorded_outcomes = Counter(
                    "layang_worker_outcomes",
                    "Delivery outcomes this worker process recorded, by status.",
                    ["status"],
                    registry=PROCESS_REGISTRY,
                )
    return _recorded_outcomes


_site_outcomes: Counter | None = None


def site_outcome(site: str, outcome: str) -> None:
    """Count one delivery outcome (``delivered``, ``deferred``, ``bounced``, ``throttled``…)
    at a destination site, in this process's ``layang_site_outcomes`` counter."""
    global _site_outcomes
    if _site_outcomes is None:
        with _relay_lock:
            if _site_outcomes is None:
                _site_outcomes = Counter(
                    "layang_site_outcomes",
                    "Delivery outcomes by destination site (per worker process).",
                    ["site", "outcome"],
                    registry=PROCESS_REGISTRY,
                )
    _site_outcomes.labels(site=site, outcome=outcome).inc()


class DatabaseCollector:
    """Totals by event status and the state of the queue, queried when scraped."""

    def collect(self) -> Iterable[Metric]:
        yield _gauge(
            "layang_database_writable",
            "0 while this process's writes fail for want of disk (SQLite full or I/O error).",
            0 if write_health.failure() else 1,
        )
        try:
            counts = dict(
                Event.select(Event.status, peewee.fn.COUNT(Event.id))
                .where(Event.status.in_([status for _, _, status in EVENT_COUNTERS]))
                .group_by(Event.status)
                .tuples()
            )
            # Every accepted email is a recipient row from the start (its Injection).
            accepted = Recipient.select().count()
            now = now_ms()
            queued, due, oldest = (
                Recipient.select(
                    peewee.fn.COUNT(Recipient.id),
                    peewee.fn.SUM(peewee.Case(None, [(Recipient.next_attempt_at <= now, 1)], 0)),
                    peewee.fn.MIN(Recipient.created_at),
                )
                .where(Recipient.next_attempt_at.is_null(False))
                .tuples()
                .get()
            )
            sites = _site_figures(now)
        except UNAVAILABLE_ERRORS as error:
            log.warning("metrics: database unavailable: %s", error_summary(error))
            discard_connection()
            yield _gauge("layang_database_up", "Whether the database answered this scrape.", 0)
            return
        yield _gauge("layang_database_up", "Whether the database answered this scrape.", 1)
        yield _counter(*ACCEPTED, accepted)
        for name, documentation, status in EVENT_COUNTERS:
            yield _counter(name, documentation, counts.get(status, 0))
        yield _gauge(
            "layang_queue_depth",
            "Emails waiting for a delivery attempt, due now or scheduled for a retry.",
            queued,
        )
        yield _gauge("layang_queue_due", "Emails whose next delivery attempt is due.", due or 0)
        yield _gauge(
            "layang_queue_oldest_age_seconds",
            "Age of the oldest email still waiting for delivery (0 when the queue is empty).",
            max(now - oldest, 0) / 1000 if oldest is not None else 0,
        )
        yield from sites


SITE_GAUGES = (
    ("layang_site_queued", "Emails waiting for delivery, by destination site."),
    ("layang_site_sessions", "SMTP sessions open to the site, across every worker."),
    ("layang_site_limit", "Sessions the site may have now (its rule's, or less while throttled)."),
)


def _site_figures(now: int) -> list[Metric]:
    """The per-site gauges: queued (waiting mail grouped by domain, joined to the domain's
    site; a domain not resolved yet is its own site), open sessions and the limit."""
    queued: dict[str, float] = {}
    rows = (
        Recipient.select(Recipient.domain, MxDomain.site, peewee.fn.COUNT(Recipient.id))
        .join(MxDomain, peewee.JOIN.LEFT_OUTER, on=(MxDomain.domain == Recipient.domain))
        .where(Recipient.next_attempt_at.is_null(False))
        .group_by(Recipient.domain, MxDomain.site)
        .tuples()
    )
    for domain, site, count in rows:
        name = site or domain or ""
        queued[name] = queued.get(name, 0) + count
    sessions = dict(
        SiteSlot.select(SiteSlot.site, peewee.fn.COUNT(SiteSlot.id))
        .where(SiteSlot.expires_at > now)
        .group_by(SiteSlot.site)
        .tuples()
    )
    shown = set(queued) | set(sessions)
    limits = {row.site: row.limit() for row in SiteState.holding_back()}
    missing = sorted(shown - set(limits))
    for start in range(0, len(missing), 500):
        rows = SiteState.select().where(SiteState.site.in_(missing[start : start + 500]))
        limits.update({row.site: row.limit() for row in rows})
    families = [
        GaugeMetricFamily(name, help_text, labels=["site"]) for name, help_text in SITE_GAUGES
    ]
    for family, values in zip(families, (queued, sessions, limits), strict=True):
        for site, value in sorted(values.items()):
            if value is not None:
                family.add_metric([site], value)
    return families


def _counter(name: str, documentation: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, documentation, value=value)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


class _AppMetrics:
    """What the API's ``/metrics`` shows: the database figures, then this process's own."""

    def __init__(self) -> None:
        self.database = DatabaseCollector()

    def collect(self) -> Iterable[Metric]:
        yield from self.database.collect()
        yield from PROCESS_REGISTRY.collect()


_APP_METRICS = _AppMetrics()


def render_app_metrics() -> bytes:
    """The body of ``GET /metrics`` in the Prometheus text format."""
    return generate_latest(_APP_METRICS)


def serve_process_metrics(listener: socket.socket) -> None:
    """Expose this process's own measurements on ``listener`` (a bound, listening socket, which
    it then owns) from a background thread."""

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True

        def server_bind(self) -> None:
            # Bound when the configuration was checked (layang.serving.preflight): serve that
            # socket.
            self.socket.close()
            self.socket = listener
            self.server_name, self.server_port = listener.getsockname()[:2]
            self.setup_environ()

        def server_activate(self) -> None:
            """Already listening."""

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Scrapes are not worth a log line each."""

    host, port = listener.getsockname()[:2]
    server = Server((host, port), QuietHandler)
    server.set_app(make_wsgi_app(PROCESS_REGISTRY))
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("metrics listening on http://%s:%d/metrics", host, port)
