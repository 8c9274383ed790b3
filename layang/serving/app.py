"""The Flask application factory."""

from __future__ import annotations

import logging

import flask

from layang.api import init_api
from layang.api.errors import RETRY_AFTER_SECONDS, ApiError, ServiceUnavailable, error_response
from layang.config import Config
from layang.db import (
    UNAVAILABLE_ERRORS,
    database,
    discard_connection,
    error_summary,
    is_postgresql,
    open_database,
    write_health,
)
from layang.domain import tracking_domains
from layang.logs import configure_logging
from layang.metrics import render_app_metrics
from layang.migrations import upgrade, upgrade_once
from layang.serving.body_budget import (
    MIB,
    BodyBudgetMiddleware,
    process_budget,
    return_large_blocks_to_the_os,
)
from layang.web import init_web

log = logging.getLogger("layang.app")

# The Prometheus text format, version 0.0.4: what every Prometheus server reads.
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
METRICS_ENDPOINT = "metrics"


def init_db(config: Config) -> bool:
    """Open the configured database and bring its schema up to date, unless this process (or
    the gunicorn master it was forked from, see ``layang.serving.processes``) already did.

    Returns False when a PostgreSQL server could not be reached: the process still starts (a
    gunicorn worker that fails to boot takes the whole server down), answers 503 meanwhile, and
    upgrades the schema before the first request that finds the database back.
    """
    open_database(config.database_url)
    try:
        upgrade_once(config.database_url)
    except UNAVAILABLE_ERRORS as error:
        if not is_postgresql():
            raise
        log.warning(
            "database unavailable at start, serving 503 until it is back: %s",
            error_summary(error),
        )
        discard_connection()
        return False
    return True


def register_operations(app: flask.Flask) -> None:
    @app.get("/healthz")
    def healthz() -> tuple[dict[str, str], int] | flask.Response:
        database.execute_sql("SELECT 1").fetchall()
        # A full disk leaves reads working: only the failing writes tell.
        cause = write_health.failure()
        if cause is not None:
            return error_response(
                ServiceUnavailable(f"Database writes are failing: {cause}."),
                {"Retry-After": RETRY_AFTER_SECONDS},
            )
        return {"status": "ok"}, 200

    @app.get("/internal/tls-allowed")
    def tls_allowed() -> tuple[dict[str, str], int] | flask.Response:
        # Caddy's on-demand TLS "ask" (docs/deploy.md): 200 lets it get a certificate for the
        # name, anything else refuses. Only a verified tracking domain is allowed.
        domain = flask.request.args.get("domain", "")[:253]
        if domain and tracking_domains.tls_allowed(domain):
            return {"domain": domain.strip().rstrip(".").lower()}, 200
        refusal = f"{domain[:80]!r} is no verified tracking domain."
        return error_response(ApiError(refusal, status=404, code="not_found"))

    @app.get("/metrics")
    def metrics() -> flask.Response:
        # No authentication: meant for a scraper on the internal network (see docs/deploy.md).
        return flask.Response(render_app_metrics(), content_type=METRICS_CONTENT_TYPE)


def connect_per_thread() -> None:
    # One connection per worker thread, kept open: reconnecting per request costs a WAL
    # checkpoint on SQLite and a TCP + auth round trip on PostgreSQL.
    if flask.request.endpoint == METRICS_ENDPOINT:
        return  # it reports layang_database_up 0 rather than failing without the database
    database.connect(reuse_if_open=True)


def upgrade_when_back() -> None:
    """Before the first request that reaches the database after a start without it."""
    app = flask.current_app
    if app.extensions.get("layang_schema_pending"):
        try:
            upgrade()
        except UNAVAILABLE_ERRORS:
            if flask.request.endpoint == METRICS_ENDPOINT:
                return
            raise
        app.extensions["layang_schema_pending"] = False


def create_app(config: Config | None = None) -> flask.Flask:
    """Build the WSGI application from ``config`` (default: the environment)."""
    config = config or Config.from_env()
    configure_logging(config)
    app = flask.Flask("layang", static_folder=None)
    app.config.update(
        LAYANG=config,
        SECRET_KEY=config.secret_key,
        # The exact limit is checked on the decoded size.
        MAX_CONTENT_LENGTH=config.max_request_body_bytes,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False
    if not init_db(config):
        app.extensions["layang_schema_pending"] = True
        app.before_request(upgrade_when_back)
    app.before_request(connect_per_thread)
    init_api(app)
    init_web(app)
    register_operations(app)
    budget = process_budget(config.http_body_budget_mb * MIB)
    app.wsgi_app = BodyBudgetMiddleware(app.wsgi_app, budget)  # type: ignore[method-assign]
    return_large_blocks_to_the_os()
    return app
