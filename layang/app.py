"""The Flask application factory."""

from __future__ import annotations

import flask
from swagger_ui_bundle import swagger_ui_path

from layang.api import init_api
from layang.config import Config
from layang.db import database, open_database, upgrade
from layang.logs import configure_logging
from layang.models import MIGRATIONS
from layang.web import init_web


def init_db(config: Config) -> None:
    """Open the configured database and bring its schema up to date."""
    open_database(config.database_url)
    upgrade(MIGRATIONS)


def register_operations(app: flask.Flask) -> None:
    @app.get("/healthz")
    def healthz() -> tuple[dict[str, str], int]:
        database.execute_sql("SELECT 1")
        return {"status": "ok"}, 200

    @app.get("/docs/assets/<path:filename>")
    def docs_assets(filename: str) -> flask.Response:
        # Swagger UI comes from a Python package so /docs works with no network access.
        return flask.send_from_directory(str(swagger_ui_path), filename, max_age=86400)


def connect_per_thread() -> None:
    # One connection per worker thread, kept open: reconnecting per request costs a WAL
    # checkpoint on SQLite and a TCP + auth round trip on PostgreSQL.
    database.connect(reuse_if_open=True)


def create_app(config: Config | None = None) -> flask.Flask:
    """Build the WSGI application from ``config`` (default: the environment)."""
    config = (config or Config.from_env()).with_secret_key()
    configure_logging(config)
    app = flask.Flask("layang", static_folder=None)
    app.config.update(
        LAYANG=config,
        SECRET_KEY=config.secret_key,
        # Base64 grows the attachments by a third; the exact limit is checked on the decoded size.
        MAX_CONTENT_LENGTH=config.max_message_bytes * 4 // 3 + 1024 * 1024,
        JSON_SORT_KEYS=False,
    )
    app.json.sort_keys = False
    init_db(config)
    app.before_request(connect_per_thread)
    init_api(app)
    init_web(app)
    register_operations(app)
    return app
