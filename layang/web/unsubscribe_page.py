"""``/u/<token>``: one-click unsubscribe (RFC 8058) from broadcast mail, whichever way it came in.

Mailbox providers POST to the URL of the ``List-Unsubscribe`` header, with no cookie and no
form of ours, so the signed token is the whole credential and the POST needs nothing else. A
GET (a person following the link, or a scanner) only shows a page whose button POSTs. Neither
ever redirects: the page cannot be used to send anyone elsewhere.
"""

from __future__ import annotations

import flask
from flask import current_app, render_template

from layang.domain.errors import NotFound
from layang.domain.suppressions import find_unsubscribe, unsubscribe
from layang.mail.unsubscribe import UnsubscribeTokens


def _tokens() -> UnsubscribeTokens:
    config = current_app.config["LAYANG"]
    return UnsubscribeTokens(config.secret_key, config.public_url, config.bounce_domain)


def _invalid() -> tuple[str, int]:
    return render_template("unsubscribe_invalid.html"), 404


def show(token: str) -> tuple[str, int] | str:
    try:
        request = find_unsubscribe(_tokens(), token)
    except NotFound:
        return _invalid()
    return render_template("unsubscribe.html", token=token, request=request)


def confirm(token: str) -> tuple[str, int] | str:
    try:
        request = unsubscribe(_tokens(), token)
    except NotFound:
        return _invalid()
    return render_template("unsubscribe_done.html", request=request)


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/u/<token>", "unsubscribe", show, methods=["GET"])
    blueprint.add_url_rule("/u/<token>", "unsubscribe_confirm", confirm, methods=["POST"])
