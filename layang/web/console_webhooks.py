"""The console's Webhooks page: endpoints, their recent delivery attempts, enable or disable,
send a test event. The same domain functions as ``/v1/layang/webhooks``."""

from __future__ import annotations

import functools
from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, url_for

from layang.domain import webhooks
from layang.domain.errors import LayangError
from layang.models import WEBHOOK_EVENT_TYPES, Account
from layang.web.console import signed_in

RECENT_ATTEMPTS = 10


def _page(account: Account, new_secret: tuple[str, str] | None = None) -> Any:
    endpoints = webhooks.list_endpoints(account, limit=500).items
    attempts = {
        endpoint.id: webhooks.list_attempts(account, endpoint.id, limit=RECENT_ATTEMPTS).items
        for endpoint in endpoints
    }
    return render_template(
        "console/webhooks.html",
        endpoints=endpoints,
        attempts=attempts,
        event_types=WEBHOOK_EVENT_TYPES,
        new_secret=new_secret,
    )


@signed_in
def webhooks_page(account: Account) -> Any:
    if request.method == "POST":
        events = request.form.getlist("events") or ["*"]
        try:
            made = webhooks.create_endpoint(
                account,
                request.form.get("url", ""),
                events,
                request.form.get("description", "").strip(),
                current_app.config["LAYANG"],
            )
        except LayangError as error:
            flash(error.message, "error")
            return redirect(url_for("web.console_webhooks"))
        # Shown in this answer only, never put in the session cookie (signed, not secret).
        return _page(account, new_secret=(made.url, made.secret or ""))
    return _page(account)


@signed_in
def webhook_action(account: Account, endpoint_id: str, action: str) -> Any:
    try:
        if action == "test":
            webhooks.send_test(account, endpoint_id)
            flash("A test event is queued; its attempt shows below within seconds.")
        elif action in ("enable", "disable"):
            shown = webhooks.set_enabled(
                account, endpoint_id, action == "enable", "Disabled in the console."
            )
            flash(f"{shown.url} is {'enabled' if shown.enabled else 'disabled'}.")
        else:
            webhooks.delete_endpoint(account, endpoint_id)
            flash("The endpoint was deleted.")
    except LayangError as error:
        flash(error.message, "error")
    return redirect(url_for("web.console_webhooks"))


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule(
        "/console/webhooks", "console_webhooks", webhooks_page, methods=["GET", "POST"]
    )
    for action in ("test", "enable", "disable", "delete"):
        blueprint.add_url_rule(
            f"/console/webhooks/<endpoint_id>/{action}",
            f"console_webhook_{action}",
            functools.partial(webhook_action, action=action),
            methods=["POST"],
        )
