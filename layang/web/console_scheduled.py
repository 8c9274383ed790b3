"""``/console/scheduled``: the account's scheduled mail, soonest first, each cancellable until
its time (docs/api.md, "Scheduled sends")."""

from __future__ import annotations

from typing import Any

import flask
from flask import flash, redirect, render_template, request, url_for

from layang.domain import scheduled_sends
from layang.domain.errors import LayangError
from layang.models import Account
from layang.web.console import signed_in


@signed_in
def scheduled_page(account: Account) -> Any:
    return render_template("console/scheduled.html", sends=scheduled_sends.list_scheduled(account))


@signed_in
def cancel(account: Account) -> Any:
    transmission_id = request.form.get("transmission", "")[:64]
    try:
        scheduled_sends.cancel(account, transmission_id)
    except LayangError as error:
        flash(error.message, "error")
    else:
        flash(f"Transmission {transmission_id} is cancelled: it will not be sent.")
    return redirect(url_for("web.console_scheduled"))


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/console/scheduled", "console_scheduled", scheduled_page)
    blueprint.add_url_rule(
        "/console/scheduled/cancel", "console_scheduled_cancel", cancel, methods=["POST"]
    )
