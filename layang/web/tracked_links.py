"""``/t/o/<token>`` (the open pixel) and ``/t/c/<token>`` (a tracked link).

A click redirects only while its link is valid and the mail came from a live account; an
expired link, or any link of a sandbox account, answers a page that shows the destination as a
link for the person to follow (see :mod:`layang.domain.engagement`).
"""

from __future__ import annotations

import base64

import flask
from flask import current_app, render_template, request
from werkzeug.exceptions import NotFound

from layang.domain.engagement import Engagement, RecordRemoved, follow_tracking_link
from layang.mail.tracking import InvalidToken, Tracker
from layang.models import CLICK, OPEN

PIXEL = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
_DAY_MS = 24 * 60 * 60 * 1000


def _tracker() -> Tracker:
    config = current_app.config["LAYANG"]
    return Tracker(current_app.config["SECRET_KEY"], config.public_url)


def _max_age_ms() -> int:
    return current_app.config["LAYANG"].tracking_token_days * _DAY_MS


def _user_agent() -> str:
    return request.headers.get("User-Agent", "")


def opened(token: str) -> flask.Response:
    try:
        read = _tracker().read(token, "o")
        follow_tracking_link(read, OPEN, {"userAgent": _user_agent()}, max_age_ms=_max_age_ms())
    except InvalidToken:
        raise NotFound() from None
    response = flask.Response(PIXEL, mimetype="image/gif")
    response.headers["Cache-Control"] = "no-store, no-cache, must-revalidate, max-age=0"
    return response


def clicked(token: str) -> flask.Response:
    try:
        read = _tracker().read(token, "c")
        detail: dict[str, object] = {"url": read.url, "userAgent": _user_agent()}
        engagement = follow_tracking_link(read, CLICK, detail, max_age_ms=_max_age_ms())
    except RecordRemoved:
        # A link of ours in an email older than the records kept: the reader still gets to it.
        engagement = Engagement(expired=True, sandbox=False)
    except InvalidToken:
        raise NotFound() from None
    if engagement.expired:
        response = _destination_page(
            read.url, "This link has expired", "The email's link led to this address:"
        )
    elif engagement.sandbox:
        response = _destination_page(
            read.url, "Leaving Layang", "A test email's link leads to this address:"
        )
    else:
        response = flask.redirect(read.url, code=302)
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def _destination_page(url: str | None, title: str, message: str) -> flask.Response:
    return flask.make_response(
        render_template("tracked_link.html", title=title, message=message, url=url), 200
    )


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/t/o/<token>", "track_open", opened, methods=["GET"])
    blueprint.add_url_rule("/t/c/<token>", "track_click", clicked, methods=["GET"])
