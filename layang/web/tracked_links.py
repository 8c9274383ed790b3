"""``/t/o/<token>`` (the open pixel) and ``/t/c/<token>`` (a tracked link)."""

from __future__ import annotations

import base64

import flask
from flask import current_app, request
from werkzeug.exceptions import NotFound

from layang.domain.engagement import record_engagement
from layang.models import CLICK, OPEN
from layang.sending.tracking import InvalidToken, Tracker

PIXEL = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")


def _tracker() -> Tracker:
    config = current_app.config["LAYANG"]
    return Tracker(current_app.config["SECRET_KEY"], config.public_url)


def _user_agent() -> str:
    return request.headers.get("User-Agent", "")


def opened(token: str) -> flask.Response:
    try:
        recipient_id, _ = _tracker().read(token, "o")
        record_engagement(recipient_id, OPEN, {"userAgent": _user_agent()})
    except InvalidToken:
        raise NotFound() from None
    response = flask.Response(PIXEL, mimetype="image/gif")
    response.headers["Cache-Control"] = "no-store, no-cache, must-revalidate, max-age=0"
    return response


def clicked(token: str) -> flask.Response:
    try:
        recipient_id, url = _tracker().read(token, "c")
        record_engagement(recipient_id, CLICK, {"url": url, "userAgent": _user_agent()})
    except InvalidToken:
        raise NotFound() from None
    response = flask.redirect(url, code=302)
    response.headers["Cache-Control"] = "no-store"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/t/o/<token>", "track_open", opened, methods=["GET"])
    blueprint.add_url_rule("/t/c/<token>", "track_click", clicked, methods=["GET"])
