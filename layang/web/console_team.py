"""The console's Team, API keys and Audit pages (CONTRACT section 21). Who may post which form
is ``layang.web.console.role_needed``'s table; the rules that depend on what is posted (an
admin never touches an owner, a developer issues only send and read keys) are checked here and
in ``layang.team.people``."""

from __future__ import annotations

import functools
from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, url_for

from layang.domain import accounts
from layang.domain.errors import LayangError, NotFound, RoleNeeded
from layang.models import ADMIN, FULL, READ, ROLES, SCOPES, SEND, Account, ApiKey
from layang.team import audit, invitations, people, two_factor
from layang.web.console import client_address, day_bound, signed_in

# What a developer may issue or revoke; a full key needs an admin.
DEVELOPER_SCOPES = (SEND, READ)


def _actor() -> str:
    return flask.g.console_actor


@signed_in
def team_page(account: Account) -> Any:
    if request.method == "POST":
        email = request.form.get("email", "")
        try:
            invitations.invite(
                account,
                email,
                request.form.get("role", ""),
                actor=_actor(),
                actor_role=flask.g.console_role,
                source=client_address(),
                config=current_app.config["LAYANG"],
            )
        except LayangError as error:
            flash(error.message, "error")
        else:
            flash(f"An invitation is on its way to {email.strip()}; its link works for 72 hours.")
        return redirect(url_for("web.console_team"))
    return render_template(
        "console/team.html",
        members=people.team(account),
        invitations=invitations.pending_invitations(account),
        second_factor=two_factor.with_second_factor(account),
        roles=ROLES,
        my_role=flask.g.console_role,
        me=getattr(flask.g.get("console_user"), "id", None),
        may_manage=people.role_allows(flask.g.console_role, ADMIN),
    )


@signed_in
def member_action(account: Account, user_id: str, action: str) -> Any:
    try:
        if action == "role":
            membership = people.set_role(
                account,
                user_id,
                request.form.get("role", ""),
                actor=_actor(),
                actor_role=flask.g.console_role,
                source=client_address(),
            )
            flash(f"{membership.user.email} is now {membership.role}.")
        else:
            people.remove_member(
                account,
                user_id,
                actor=_actor(),
                actor_role=flask.g.console_role,
                source=client_address(),
            )
            flash("The member was removed; their sessions in this account have ended.")
    except RoleNeeded:
        raise
    except LayangError as error:
        flash(error.message, "error")
    return redirect(url_for("web.console_team"))


@signed_in
def settings(account: Account) -> Any:
    required = request.form.get("two_factor") == "required"
    two_factor.require_two_factor(account, required, actor=_actor(), source=client_address())
    flash(
        "Everyone in this account now needs a second factor to sign in."
        if required
        else "A second factor is now each person's choice."
    )
    return redirect(url_for("web.console_team"))


def _keys_page(account: Account, new_secret: tuple[ApiKey, str] | None = None) -> Any:
    return render_template(
        "console/keys.html",
        keys=accounts.list_api_keys(account),
        scopes=SCOPES if people.role_allows(flask.g.console_role, ADMIN) else DEVELOPER_SCOPES,
        new_secret=new_secret,
        may_issue=people.role_allows(flask.g.console_role, "developer"),
    )


@signed_in
def keys_page(account: Account) -> Any:
    if request.method == "POST":
        scope = request.form.get("scope", "")
        label = request.form.get("label", "").strip()[:200]
        if scope == FULL and not people.role_allows(flask.g.console_role, ADMIN):
            raise RoleNeeded(ADMIN, flask.g.console_role)
        try:
            key, secret = accounts.create_api_key(account, label, scope)
        except LayangError as error:
            flash(error.message, "error")
            return redirect(url_for("web.console_keys"))
        audit.record(
            account,
            _actor(),
            "api_key.created",
            key.id,
            source=client_address(),
            detail={"scope": scope, "label": label},
        )
        # Shown in this answer only, never put in the session cookie (signed, not secret).
        return _keys_page(account, new_secret=(key, secret))
    return _keys_page(account)


@signed_in
def key_revoke(account: Account, key_id: str) -> Any:
    key = ApiKey.get_or_none((ApiKey.id == key_id) & (ApiKey.account == account.id))
    if key is None:
        raise NotFound(f"No API key {key_id!r}.")
    if key.scope == FULL and not people.role_allows(flask.g.console_role, ADMIN):
        raise RoleNeeded(ADMIN, flask.g.console_role)
    if key.revoked_at is None:
        accounts.revoke_api_key(key.id)
        audit.record(account, _actor(), "api_key.revoked", key.id, source=client_address())
    flash(f"Key {key.label or key.id} is revoked; it works nowhere any more.")
    return redirect(url_for("web.console_keys"))


@signed_in
def audit_page(account: Account) -> Any:
    args = request.args
    filters = {
        "actor": args.get("actor", "").strip(),
        "action": args.get("action", "").strip(),
        "since": args.get("since", ""),
    }
    try:
        page = audit.browse(
            account,
            since=day_bound(filters["since"], end=False),
            actor=filters["actor"] or None,
            action=filters["action"] or None,
            cursor=args.get("cursor") or None,
            limit=50,
        )
    except LayangError as error:
        flash(error.message, "error")
        page = audit.AuditPage([], None)
    kept = {k: v for k, v in filters.items() if v}
    older = (
        url_for("web.console_audit", **kept, cursor=page.next_cursor) if page.next_cursor else None
    )
    return render_template(
        "console/audit.html",
        entries=page.items,
        filters=filters,
        older_url=older,
        detail_of=audit.detail_of,
    )


def register(blueprint: flask.Blueprint) -> None:
    rules = [
        ("/console/team", "console_team", team_page, ["GET", "POST"]),
        (
            "/console/team/<user_id>/role",
            "console_member_role",
            functools.partial(member_action, action="role"),
            ["POST"],
        ),
        (
            "/console/team/<user_id>/remove",
            "console_member_remove",
            functools.partial(member_action, action="remove"),
            ["POST"],
        ),
        ("/console/settings", "console_settings", settings, ["POST"]),
        ("/console/keys", "console_keys", keys_page, ["GET", "POST"]),
        ("/console/keys/<key_id>/revoke", "console_key_revoke", key_revoke, ["POST"]),
        ("/console/audit", "console_audit", audit_page, ["GET"]),
    ]
    for rule, endpoint, view, methods in rules:
        blueprint.add_url_rule(rule, endpoint, view, methods=methods)
