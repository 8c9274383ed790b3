"""The console's Recipients page: a sandbox account's authorized recipients, added (a
verification email goes out), sent a new verification email, or removed. The same domain
functions as ``/v1/layang/authorized-recipients``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, url_for

from layang.domain import sandbox
from layang.domain.errors import LayangError
from layang.mail.message import MAX_DISPLAY_NAME, has_line_break, normalize_address
from layang.models import Account
from layang.web.console import signed_in


@signed_in
def recipients_page(account: Account) -> Any:
    config = current_app.config["LAYANG"]
    if request.method == "POST":
        email, name = request.form.get("email", ""), request.form.get("name", "").strip()
        try:
            address = normalize_address(email)
            if has_line_break(name) or len(name) > MAX_DISPLAY_NAME:
                raise ValueError("Not a valid name.")
            sandbox.add_authorized_recipient(account, address, name or None, config)
        except ValueError as error:  # InvalidAddress is one
            flash(f"{email}: {error}", "error")
        except LayangError as error:
            flash(error.message, "error")
        else:
            flash(f"Verification email sent to {address}.")
        return redirect(url_for("web.console_recipients"))
    page = sandbox.list_authorized_recipients(account, limit=500)
    return render_template(
        "console/recipients.html", recipients=page.items, sandbox_sender=config.sandbox_sender
    )


@signed_in
def recipient_action(account: Account, recipient_id: str, action: str) -> Any:
    config = current_app.config["LAYANG"]
    try:
        recipient = sandbox.get_authorized_recipient(account, recipient_id)
        if action == "resend":
            sandbox.resend_verification(account, recipient_id, config)
            flash(f"A new verification email is on its way to {recipient.email}.")
        else:
            sandbox.delete_authorized_recipient(account, recipient_id)
            flash(f"{recipient.email} was removed.")
    except LayangError as error:
        flash(error.message, "error")
    return redirect(url_for("web.console_recipients"))


def register(blueprint: flask.Blueprint) -> None:
    rules: list[tuple[str, str, Callable[..., Any], list[str]]] = [
        ("/console/recipients", "console_recipients", recipients_page, ["GET", "POST"]),
        (
            "/console/recipients/<recipient_id>/resend",
            "console_recipient_resend",
            functools.partial(recipient_action, action="resend"),
            ["POST"],
        ),
        (
            "/console/recipients/<recipient_id>/delete",
            "console_recipient_delete",
            functools.partial(recipient_action, action="delete"),
            ["POST"],
        ),
    ]
    for rule, endpoint, view, methods in rules:
        blueprint.add_url_rule(rule, endpoint, view, methods=methods)
