"""``/console/queue``: the account's mail waiting for delivery, by recipient domain, with the
state of each destination site; the sites that hold mail back are flagged in the navigation."""

from __future__ import annotations

from typing import Any

import flask
from flask import g, render_template

from layang.domain.queue_view import account_attention, account_queue
from layang.models import Account
from layang.web.console import signed_in


@signed_in
def queue_page(account: Account) -> Any:
    items = account_queue(account.id)
    attention = [item for item in items if item.state != "ok"]
    return render_template("console/queue.html", items=items, attention=attention)


def queue_attention() -> int:
    """How many of the signed-in account's recipient domains wait on a throttled or
    suspended site (the badge beside Queue in the navigation)."""
    account = g.get("console_account")
    if account is None:
        return 0
    return len(account_attention(account.id))


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/console/queue", "console_queue", queue_page, methods=["GET"])
    blueprint.add_app_template_global(queue_attention, "queue_attention")
