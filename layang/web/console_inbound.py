"""The console's Inbound page: mail received for the account's inbound routes, newest first, and
one message with its route, what was posted and every attempt to post it (with a retry). The
same domain functions as ``/v1/layang/inbound/messages``."""

from __future__ import annotations

from typing import Any

import flask
from flask import flash, redirect, render_template, request, url_for

from layang.domain import inbound_mail
from layang.domain.errors import LayangError
from layang.domain.inbound_routing import list_routes
from layang.models import Account
from layang.web.console import signed_in

PAGE_SIZE = 50


@signed_in
def inbound_page(account: Account) -> Any:
    status = request.args.get("status") or None
    if status not in (None, *inbound_mail.STATUSES):
        status = None
    page = inbound_mail.list_messages(
        account, limit=PAGE_SIZE, cursor=request.args.get("cursor"), status=status
    )
    routes = list_routes(account, limit=500).items
    return render_template(
        "console/inbound.html",
        page=page,
        routes=routes,
        status=status,
        statuses=inbound_mail.STATUSES,
    )


@signed_in
def inbound_message_page(account: Account, message_id: str) -> Any:
    message = inbound_mail.get_message(account, message_id)
    return render_template("console/inbound_message.html", item=message, m=message.message)


@signed_in
def inbound_retry(account: Account, message_id: str) -> Any:
    try:
        inbound_mail.retry_message(account, message_id)
        flash("Posted again: the attempt shows below within seconds.")
    except LayangError as error:
        flash(error.message, "error")
    return redirect(url_for("web.console_inbound_message", message_id=message_id))


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/console/inbound", "console_inbound", inbound_page, methods=["GET"])
    blueprint.add_url_rule(
        "/console/inbound/<message_id>",
        "console_inbound_message",
        inbound_message_page,
        methods=["GET"],
    )
    blueprint.add_url_rule(
        "/console/inbound/<message_id>/retry",
        "console_inbound_retry",
        inbound_retry,
        methods=["POST"],
    )
