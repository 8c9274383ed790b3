"""``/console/suppressions``: the console's page of the suppression list: search by address,
filter by reason, add an address by hand, take one off."""

from __future__ import annotations

from typing import Any

import flask
from flask import flash, redirect, render_template, request, url_for

from layang.domain import suppressions
from layang.domain.errors import LayangError
from layang.domain.suppressions import MAX_NOTE
from layang.models import SUPPRESSION_REASONS, Account
from layang.web.console import signed_in


def _filters() -> dict[str, str]:
    reason = request.args.get("reason", "")
    return {
        "email": request.args.get("email", "").strip()[:320],
        "reason": reason if reason in SUPPRESSION_REASONS else "",
    }


@signed_in
def suppressions_page(account: Account) -> Any:
    if request.method == "POST":
        email, note = request.form.get("email", ""), request.form.get("note", "").strip()
        try:
            entry = suppressions.put_suppression(account, email, note=note[:MAX_NOTE] or None)
        except LayangError as error:
            flash(f"{email}: {error.message}", "error")
        else:
            flash(f"{entry.email} is suppressed: no mail goes to it any more.")
        return redirect(url_for("web.console_suppressions"))
    filters = _filters()
    page = suppressions.list_suppressions(
        account,
        reason=filters["reason"] or None,
        email=filters["email"] or None,
        limit=50,
        cursor=request.args.get("cursor") or None,
    )
    next_url = None
    if page.next_cursor:
        next_url = url_for(
            "web.console_suppressions",
            **{k: v for k, v in filters.items() if v},
            cursor=page.next_cursor,
        )
    return render_template(
        "console/suppressions.html",
        entries=page.items,
        filters=filters,
        reasons=SUPPRESSION_REASONS,
        next_url=next_url,
    )


@signed_in
def remove(account: Account) -> Any:
    email = request.form.get("email", "")
    try:
        suppressions.delete_suppression(account, email)
    except LayangError as error:
        flash(error.message, "error")
    else:
        flash(f"{email} was taken off the list: mail to it is sent again.")
    return redirect(url_for("web.console_suppressions"))


def register(blueprint: flask.Blueprint) -> None:
    blueprint.add_url_rule(
        "/console/suppressions",
        "console_suppressions",
        suppressions_page,
        methods=["GET", "POST"],
    )
    blueprint.add_url_rule(
        "/console/suppressions/remove", "console_suppression_remove", remove, methods=["POST"]
    )
