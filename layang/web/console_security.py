"""``/console/security``: per recipient domain the account sent to in the last day, the
transport security its MX sessions met (MTA-STS, DANE or none) and what failed."""

from __future__ import annotations

from typing import Any

import flask
from flask import render_template

from layang.destinations.tlsrpt import recent_security
from layang.models import Account
from layang.web.console import signed_in


@signed_in
def security_page(account: Account) -> Any:
    return render_template("console/security.html", domains=recent_security(account.id))


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule("/console/security", "console_security", security_page, methods=["GET"])
