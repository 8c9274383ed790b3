"""``/console/tracking-domains``: the account's own domains for tracked links and the pixel,
the CNAME each needs, verification and removal (docs/api.md, "Tracking domains")."""

from __future__ import annotations

from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, url_for

from layang.domain import tracking_domains
from layang.domain.errors import LayangError
from layang.models import Account
from layang.web.console import signed_in


@signed_in
def tracking_domains_page(account: Account) -> Any:
    config = current_app.config["LAYANG"]
    if request.method == "POST":
        name = request.form.get("domain", "")[:253]
        try:
            added = tracking_domains.create_tracking_domain(account, name, config)
        except LayangError as error:
            flash(error.message, "error")
        else:
            flash(f"{added.domain} is added: publish its CNAME, then verify it.")
        return redirect(url_for("web.console_tracking_domains"))
    return render_template(
        "console/tracking_domains.html",
        domains=tracking_domains.list_tracking_domains(account, config),
    )


@signed_in
def tracking_domain_action(account: Account, domain: str, action: str) -> Any:
    config = current_app.config["LAYANG"]
    try:
        if action == "verify":
            state = tracking_domains.verify_tracking_domain(account, domain, config)
            if state.status == tracking_domains.VERIFIED:
                flash(f"{state.domain} is verified: tracked links use it now.")
            else:
                flash(f"{state.domain}: the CNAME is not there yet ({state.found}).", "error")
        else:
            tracking_domains.delete_tracking_domain(account, domain)
            flash(f"{domain} is removed: tracked links use the service's host again.")
    except LayangError as error:
        flash(error.message, "error")
    return redirect(url_for("web.console_tracking_domains"))


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule(
        "/console/tracking-domains",
        "console_tracking_domains",
        tracking_domains_page,
        methods=["GET", "POST"],
    )
    blueprint.add_url_rule(
        "/console/tracking-domains/<domain>/<any(verify, delete):action>",
        "console_tracking_domain_action",
        tracking_domain_action,
        methods=["POST"],
    )
