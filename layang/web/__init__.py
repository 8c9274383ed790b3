"""Server-rendered pages: the console, the sandbox consent page, the tracking links and the
unsubscribe page."""

from __future__ import annotations

import functools
from pathlib import Path

import flask

from layang.web import (
    consent_page,
    console,
    console_activity,
    console_domains,
    console_guardrails,
    console_inbound,
    console_overview,
    console_people,
    console_queue,
    console_recipients,
    console_scheduled,
    console_security,
    console_suppressions,
    console_team,
    console_templates,
    console_tracking_domains,
    console_webhooks,
    error_pages,
    tracked_links,
    unsubscribe_page,
)

web = flask.Blueprint(
    "web",
    __name__,
    template_folder="templates",
    static_folder="static",
    static_url_path="/static",
)
consent_page.register(web)
tracked_links.register(web)
unsubscribe_page.register(web)
console.register(web)
console_activity.register(web)
console_recipients.register(web)
console_domains.register(web)
console_templates.register(web)
console_people.register(web)
console_team.register(web)
console_overview.register(web)
console_suppressions.register(web)
console_scheduled.register(web)
console_tracking_domains.register(web)
console_webhooks.register(web)
console_queue.register(web)
console_inbound.register(web)
console_security.register(web)
console_guardrails.register(web)
error_pages.register(web)


@web.get("/favicon.ico")
def favicon() -> flask.Response:
    """For the pages that name no icon (the API's documentation, a JSON answer shown raw).
    Served from memory: browsers often drop this request half-way, which would leave a file
    streamed from disk open until collected."""
    response = flask.Response(_favicon(), mimetype="image/svg+xml")
    response.cache_control.public = True
    response.cache_control.max_age = 86400
    return response


@functools.cache
def _favicon() -> bytes:
    return (Path(web.static_folder or "") / "favicon.svg").read_bytes()


def page_security_headers(response: flask.Response) -> flask.Response:
    """Pages must not be framed (a framed Give Consent button could be clicked by trickery)
    and must not leak their URL, which may carry a token, to other sites."""
    if response.mimetype == "text/html":
        response.headers.setdefault(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
            "form-action 'self'; base-uri 'none'",
        )
        response.headers.setdefault("X-Frame-Options", "DENY")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def init_web(app: flask.Flask) -> None:
    config = app.config["LAYANG"]
    app.config.update(
        SESSION_COOKIE_NAME="layang_session",
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Lax",
        SESSION_COOKIE_SECURE=config.public_url.startswith("https://"),
        PERMANENT_SESSION_LIFETIME=12 * 3600,
    )
    app.register_blueprint(web)
    app.after_request(page_security_headers)
