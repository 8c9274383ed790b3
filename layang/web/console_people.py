"""Signing in and out of the console, and what a person does about themself (CONTRACT section
21): email and password then a TOTP code, the one-time links (set-up, invitation, reset), the
second factor's enrolment, their page (password, sessions), switching accounts. A development
sign-in with an API key stays while ``key_signin_allowed`` says so."""

from __future__ import annotations

import secrets
from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, session, url_for

from layang.clock import now_ms
from layang.domain.accounts import authenticate_key
from layang.domain.errors import InvalidInput, NotFound
from layang.models import SEND, Account, ConsoleUser
from layang.sealing import KeyUnavailable, seal, unseal
from layang.team import (
    audit,
    key_sessions,
    links,
    passkeys,
    passwords,
    people,
    sessions,
)
from layang.team.two_factor import (
    check_totp,
    enrol_totp,
    has_second_factor,
    has_totp,
    new_totp_seed,
    totp_uri,
    two_factor_required,
)
from layang.web.console import (
    client_address,
    key_signin_allowed,
    require_csrf,
    safe_next,
    signed_in,
)

# How long the step between a right password and its code may take.
PENDING_MS = 5 * 60_000
WRONG = "Wrong email or password."  # the same for an unknown address: no enumeration


def _config() -> Any:
    return current_app.config["LAYANG"]


def _fresh_session() -> None:
    """Forget everything the cookie held (a new CSRF token too), so nothing set before signing
    in survives it."""
    session.clear()
    session["csrf"] = secrets.token_urlsafe(32)
    session.permanent = True


def _pending(name: str) -> ConsoleUser | None:
    """The user a half-done step (``name``: "pending" or "enrol") is about, while it is fresh."""
    value = session.get(name)
    if not isinstance(value, dict) or now_ms() - int(value.get("at", 0)) > PENDING_MS:
        return None
    return ConsoleUser.get_or_none(ConsoleUser.id == value.get("user"))


def _start_session(user: ConsoleUser) -> Any:
    target = safe_next(session.get("next"))
    mine = people.memberships(user)
    _fresh_session()
    account = mine[0].account if mine else None
    session["user_sid"] = sessions.open_session(
        user, account, client_address(), request.headers.get("User-Agent", "")
    )
    return redirect(target)


def _key_login() -> tuple[str | None, Any]:
    credential = authenticate_key(request.form.get("api_key", "").strip())
    if credential is None:
        return "That API key is unknown or revoked.", None
    if credential.scope == SEND:
        return "That API key may only send mail; sign in with a full or read key.", None
    if not key_signin_allowed(credential.account):
        return "This account's people sign in with their email and password.", None
    _fresh_session()
    session["sid"] = key_sessions.open_session(credential.key_id)
    audit.record(
        credential.account,
        audit.key_actor(credential.key_id),
        "sign_in",
        credential.key_id,
        source=client_address(),
    )
    return None, redirect(safe_next(request.args.get("next")))


def login() -> Any:
    """Email and password (then a code, when the user has a second factor); or an API key
    while the development sign-in is allowed."""
    error = None
    status = 200
    if request.method == "POST":
        require_csrf()
        if "api_key" in request.form:
            error, done = _key_login()
            if done is not None:
                return done
            status = 401
        else:
            email = request.form.get("email", "").strip()
            password = request.form.get("password", "")
            if passwords.throttled(email, client_address()):
                error, status = "Too many attempts; wait a few minutes and try again.", 429
            else:
                check = passwords.sign_in_password(email, password, client_address(), _config())
                if check.user is None:
                    error, status = WRONG, 401
                else:
                    return _after_password(check.user)
    with_key = request.args.get("with") == "key" or not people.any_users()
    page = render_template(
        "console/login.html",
        error=error,
        with_key=with_key,
        key_signin=_config().console_key_signin is not False,
    )
    return page, status


def _after_password(user: ConsoleUser) -> Any:
    target = request.args.get("next")
    _fresh_session()
    session["next"] = safe_next(target)
    if has_second_factor(user):
        session["pending"] = {"user": user.id, "at": now_ms()}
        return redirect(url_for("web.console_login_code"))
    if two_factor_required(user):
        session["enrol"] = {"user": user.id, "at": now_ms()}
        flash("Your account requires a second factor: set it up to finish signing in.")
        return redirect(url_for("web.console_two_factor"))
    return _start_session(user)


def login_code() -> Any:
    """The second step: the six-digit code of the user's authenticator app."""
    user = _pending("pending")
    if user is None:
        flash("Sign in again: that step timed out.", "error")
        return redirect(url_for("web.console_login"))
    error = None
    if request.method == "POST":
        require_csrf()
        challenge = bytes.fromhex(session.pop("passkey_challenge", ""))
        if passwords.throttled(user.email, client_address()):
            error = "Too many attempts; wait a few minutes and try again."
        elif "credential" in request.form:
            if challenge and passkeys.authenticate(
                user, request.form["credential"], challenge, _config()
            ):
                return _start_session(user)
            error = "That passkey was not accepted."
        elif check_totp(user, request.form.get("code", ""), _config()):
            return _start_session(user)
        else:
            error = "That code is not right; codes change every 30 seconds."
            for membership in people.memberships(user):
                audit.record(
                    membership.account_id,
                    audit.user_actor(user.email),
                    "sign_in.failed",
                    user.email,
                    source=client_address(),
                    detail={"reason": "code"},
                )
    page = render_template(
        "console/login_code.html",
        error=error,
        has_totp=has_totp(user),
        has_passkey=passkeys.has_passkey(user),
    )
    return page, 401 if error else 200


def login_passkey_options() -> Any:
    """The options for signing in with one of the pending user's passkeys."""
    user = _pending("pending")
    if user is None:
        flask.abort(404)
    options, challenge = passkeys.authentication_options(user, _config())
    session["passkey_challenge"] = challenge.hex()
    return flask.Response(options, mimetype="application/json")


@signed_in
def passkey_options(account: Account) -> Any:
    """The options for making a passkey for the signed-in person."""
    user = flask.g.get("console_user")
    if user is None:
        flask.abort(404)
    options, challenge = passkeys.registration_options(user, _config())
    session["passkey_challenge"] = challenge.hex()
    return flask.Response(options, mimetype="application/json")


@signed_in
def passkey_add(account: Account) -> Any:
    user = flask.g.get("console_user")
    if user is None:
        flask.abort(404)
    challenge = bytes.fromhex(session.pop("passkey_challenge", ""))
    try:
        if not challenge:
            raise InvalidInput("credential", "Start again: press Add a passkey.")
        made = passkeys.register(
            user,
            request.form.get("credential", ""),
            challenge,
            request.form.get("label", "").strip(),
            _config(),
            client_address(),
        )
    except InvalidInput as error:
        flash(error.problem, "error")
    else:
        flash(f"Passkey {made.label} was added: sign in with it instead of a code.")
    return redirect(url_for("web.console_me"))


def logout() -> Any:
    require_csrf()
    if session.get("user_sid"):
        sessions.end_session(session["user_sid"])
    if session.get("sid"):
        key_sessions.end_session(session["sid"])
    session.clear()
    flash("You are signed out.")
    return redirect(url_for("web.console_login"))


def forgot() -> Any:
    """Ask for a reset link: the answer is the same whether or not the address is a user."""
    sent = False
    if request.method == "POST":
        require_csrf()
        email = request.form.get("email", "").strip()
        if not passwords.throttled(email, client_address()):
            passwords.request_reset(email, client_address(), _config())
        sent = True
    return render_template("console/forgot.html", sent=sent)


LINK_PAGES = {
    links.SETUP: ("Welcome to Layang", "Choose your password"),
    links.INVITE: ("You are invited", "Accept the invitation"),
    links.RESET: ("Reset your password", "Choose a new password"),
}


def link_page(token: str, purpose: str) -> Any:
    """A one-time link: choose a password (or, invited with a password already, just join),
    then set up the second factor."""
    link = links.open_link(token, purpose)
    if link is None:
        return render_template("console/link_spent.html"), 404
    user = people.user_by_email(link.email)
    needs_password = purpose != links.INVITE or user is None or user.password_hash is None
    errors: dict[str, str] = {}
    if request.method == "POST":
        require_csrf()
        password = request.form.get("password", "") if needs_password else None
        if needs_password and password != request.form.get("confirm", ""):
            errors["confirm"] = "The two passwords differ."
        else:
            try:
                user = passwords.set_password_by_link(token, purpose, password, client_address())
            except InvalidInput as error:
                errors[error.field] = error.problem
            except NotFound:
                return render_template("console/link_spent.html"), 404
            else:
                _fresh_session()
                if has_second_factor(user):
                    flash("Done: sign in with your password and your second factor.")
                    return redirect(url_for("web.console_login"))
                session["enrol"] = {"user": user.id, "at": now_ms()}
                return redirect(url_for("web.console_two_factor"))
    title, action = LINK_PAGES[purpose]
    account = link.account.name if link.account_id else None
    page = render_template(
        "console/link.html",
        link=link,
        title=title,
        action=action,
        account=account,
        needs_password=needs_password,
        errors=errors,
    )
    return page, 400 if errors else 200


def _enrolling_user() -> tuple[ConsoleUser | None, bool]:
    """Who is setting up a second factor: someone signed in, or someone who just chose a
    password (or was told to enrol while signing in); and whether they are signed in."""
    token = session.get("user_sid")
    if token:
        found = sessions.session_of(token)
        if found is not None:
            flask.g.console_user = found.user
            flask.g.console_account = found.account
            flask.g.console_role = found.role
            return found.user, True
    return _pending("enrol"), False


def two_factor() -> Any:
    """Set up TOTP: the seed (its ``otpauth://`` URI and base32 text) waits sealed in the
    cookie until a code from the app proves it was copied."""
    user, signed = _enrolling_user()
    if user is None:
        return redirect(url_for("web.console_login"))
    config = _config()
    context = f"totp-enrol:{user.id}"
    seed = None
    if request.method == "POST":
        require_csrf()
        try:
            seed = unseal(bytes.fromhex(session.get("totp_seed", "")), config.secret_key, context)
            seed = seed.decode()
        except (KeyUnavailable, ValueError):
            seed = None
    error = None
    if request.method == "POST" and seed is not None:
        try:
            enrol_totp(user, seed, request.form.get("code", ""), config, client_address())
        except InvalidInput as failure:
            error = failure.problem
        else:
            session.pop("totp_seed", None)
            if signed:
                flash("Two-factor sign-in is on.")
                return redirect(url_for("web.console_me"))
            target = session.get("next")
            _fresh_session()
            if target:
                session["next"] = target
            flash("Two-factor sign-in is on: sign in with your password and a code.")
            return redirect(url_for("web.console_login"))
    if seed is None:
        seed = new_totp_seed()
        session["totp_seed"] = seal(seed.encode(), config.secret_key, context).hex()
    page = render_template(
        "console/two_factor.html",
        seed=seed,
        uri=totp_uri(user, seed),
        error=error,
        signed=signed,
        optional=not two_factor_required(user),
    )
    return page, 400 if error else 200


@signed_in
def me_page(account: Account) -> Any:
    """The signed-in person's page: accounts and roles, password, second factor, sessions."""
    user = flask.g.get("console_user")
    if user is None:
        flash("You are signed in with an API key: there is no person to show.", "warn")
        return redirect(url_for("web.console_overview"))
    errors: dict[str, str] = {}
    if request.method == "POST":
        new = request.form.get("password", "")
        if new != request.form.get("confirm", ""):
            errors["confirm"] = "The two passwords differ."
        else:
            try:
                passwords.change_password(
                    user,
                    request.form.get("current_password", ""),
                    new,
                    session["user_sid"],
                    client_address(),
                )
            except InvalidInput as error:
                errors[error.field] = error.problem
            else:
                flash("Your password was changed; your other sessions have ended.")
                return redirect(url_for("web.console_me"))
    current = sessions.session_id(session.get("user_sid", ""))
    page = render_template(
        "console/me.html",
        user=user,
        memberships=people.memberships(user),
        sessions=sessions.list_sessions(user),
        current=current,
        has_totp=has_totp(user),
        passkeys=passkeys.user_passkeys(user),
        errors=errors,
    )
    return page, 400 if errors else 200


@signed_in
def revoke_session(account: Account, session_id: str) -> Any:
    user = flask.g.get("console_user")
    if user is None:
        flask.abort(404)
    sessions.revoke_session(user, session_id)
    flash("That session has ended.")
    return redirect(url_for("web.console_me"))


@signed_in
def switch(account: Account) -> Any:
    user = flask.g.get("console_user")
    if user is None:
        flask.abort(404)
    chosen = request.form.get("account", "")
    if not chosen.isdigit():
        flask.abort(400)
    membership = sessions.switch_account(session["user_sid"], user, int(chosen))
    flash(f"You are now in {membership.account.name} as {membership.role}.")
    return redirect(url_for("web.console_overview"))


def register(blueprint: flask.Blueprint) -> None:
    rules = [
        ("/console/login", "console_login", login, ["GET", "POST"]),
        ("/console/login/code", "console_login_code", login_code, ["GET", "POST"]),
        ("/console/logout", "console_logout", logout, ["POST"]),
        ("/console/forgot", "console_forgot", forgot, ["GET", "POST"]),
        ("/console/two-factor", "console_two_factor", two_factor, ["GET", "POST"]),
        ("/console/me", "console_me", me_page, ["GET", "POST"]),
        (
            "/console/me/sessions/<session_id>/revoke",
            "console_me_session_revoke",
            revoke_session,
            ["POST"],
        ),
        ("/console/switch", "console_switch", switch, ["POST"]),
        (
            "/console/login/passkey-options",
            "console_login_passkey_options",
            login_passkey_options,
            ["GET"],
        ),
        ("/console/passkeys/options", "console_passkey_options", passkey_options, ["GET"]),
        ("/console/passkeys", "console_passkeys", passkey_add, ["POST"]),
    ]
    for path, purpose in (
        ("welcome", links.SETUP),
        ("invitation", links.INVITE),
        ("reset", links.RESET),
    ):
        rules.append(
            (
                f"/console/{path}/<token>",
                f"console_link_{purpose}",
                lambda token, purpose=purpose: link_page(token, purpose),
                ["GET", "POST"],
            )
        )
    for rule, endpoint, view, methods in rules:
        blueprint.add_url_rule(rule, endpoint, view, methods=methods)
