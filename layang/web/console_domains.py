"""The console's Domains page: an account's sending domains with the DNS records to publish,
added, checked in DNS, their DKIM key rotated, an old key or the domain deleted. The same
domain functions as ``/v1/layang/domains``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, url_for

from layang.domain import sending_domains
from layang.domain.errors import LayangError
from layang.models import Account
from layang.web.console import signed_in


@signed_in
def domains_page(account: Account) -> Any:
    config = current_app.config["LAYANG"]
    if request.method == "POST":
        name = request.form.get("domain", "")
        try:
            state = sending_domains.create_domain(account, name, None, config)
        except LayangError as error:
            flash(error.message, "error")
        else:
            flash(f"{state.domain} was added: publish its records, then press Verify.")
        return redirect(url_for("web.console_domains"))
    page = sending_domains.list_domains(account, config, limit=500)
    return render_template(
        "console/domains.html",
        domains=page.items,
        split_txt=sending_domains.split_txt,
        development_values=sending_domains.development_values(config),
    )


@signed_in
def domain_action(account: Account, domain: str, action: str, selector: str = "") -> Any:
    config = current_app.config["LAYANG"]
    try:
        if action == "verify":
            state = sending_domains.verify_domain(account, domain, config)
            wrong = [r.purpose.upper() for r in state.records if r.status != sending_domains.OK]
            if wrong:
                flash(
                    f"{state.domain}: {state.status}; checked in DNS just now, "
                    f"{len(wrong)} not found as expected: {', '.join(wrong)}.",
                    "warn",
                )
            else:
                flash(f"{state.domain}: {state.status}; every record was found in DNS just now.")
        elif action == "rotate":
            state = sending_domains.rotate_key(account, domain, config)
            flash(f"{state.domain}: a new key waits; publish its record, then press Verify.")
        elif action == "delete-key":
            sending_domains.delete_key(account, domain, selector)
            flash(f"Key {selector} was deleted.")
        else:
            sending_domains.delete_domain(account, domain)
            flash(f"{domain} was deleted.")
    except LayangError as error:
        flash(error.message, "error")
    return redirect(url_for("web.console_domains"))


def register(blueprint: flask.Blueprint) -> None:
    rules: list[tuple[str, str, Callable[..., Any], list[str]]] = [
        ("/console/domains", "console_domains", domains_page, ["GET", "POST"]),
        *(
            (
                f"/console/domains/<domain>/{action}",
                f"console_domain_{action.replace('-', '_')}",
                functools.partial(domain_action, action=action),
                ["POST"],
            )
            for action in ("verify", "rotate", "delete")
        ),
        (
            "/console/domains/<domain>/keys/<selector>/delete",
            "console_domain_key_delete",
            functools.partial(domain_action, action="delete-key"),
            ["POST"],
        ),
    ]
    for rule, endpoint, view, methods in rules:
        blueprint.add_url_rule(rule, endpoint, view, methods=methods)
