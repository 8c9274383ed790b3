"""``/consent/<token>``: a sandbox recipient agrees to receive an account's test email.

GET only shows the request (mail scanners and link previewers open links); the button POSTs.
"""

from __future__ import annotations

import hashlib

import flask
from flask import render_template, request, url_for

from layang.domain.errors import NotFound
from layang.domain.sandbox import find_consent_request, give_consent
from layang.web.csrf import FormExpired, csrf_token, csrf_valid


def _binding(token: str) -> str:
    return "consent:" + hashlib.sha256(token.encode()).hexdigest()


def _invalid() -> tuple[str, int]:
    return render_template("consent_invalid.html"), 404


def show(token: str) -> tuple[str, int] | str:
    recipient = find_consent_request(token)
    if recipient is None:
        return _invalid()
    return render_template(
        "consent.html",
        token=token,
        account_name=recipient.account.name,
        email=recipient.email,
        csrf_token=csrf_token(_binding(token)),
    )


def accept(token: str) -> tuple[str, int] | str:
    if not csrf_valid(request.form.get("csrf_token"), _binding(token)):
        raise FormExpired(back=url_for("web.consent", token=token))
    try:
        recipient = give_consent(token)
    except NotFound:
        return _invalid()
    return render_template(
        "consent_done.html", account_name=recipient.account.name, email=recipient.email
    )


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/consent/<token>", "consent", show, methods=["GET"])
    blueprint.add_url_rule("/consent/<token>", "consent_accept", accept, methods=["POST"])
