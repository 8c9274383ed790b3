"""``/console``: the web console. Server-rendered pages over the same domain functions as the
API; every page shows only the signed-in account's data."""

from __future__ import annotations

import base64
import binascii
import functools
import hmac
import json
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, time
from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, session, url_for

import templates_store
from layang.clock import iso_ms
from layang.domain import records, sandbox, sending_domains
from layang.domain.accounts import authenticate_key
from layang.domain.errors import Forbidden, LayangError, NotFound
from layang.models import EVENT_KINDS, FULL, SEND, Account, ApiKey
from layang.sending.message import (
    MAX_DISPLAY_NAME,
    MAX_NESTING,
    has_line_break,
    nested_too_deep,
    normalize_address,
)
from layang.web.csrf import FormExpired

PREVIEW_DATA_MAX = 64 * 1024


# The forms a read key may post: they change nothing (signing out, previewing a template).
# Every other form needs a full key, so that a page added later is safe by default.
READING_FORMS = frozenset({"web.console_logout", "web.console_template"})


def _key_for_session() -> ApiKey | None:
    key_id = session.get("key_id")
    if not key_id:
        return None
    return (
        ApiKey.select(ApiKey, Account)
        .join(Account)
        .where((ApiKey.id == key_id) & ApiKey.revoked_at.is_null() & (ApiKey.scope != SEND))
        .first()
    )


def signed_in(view: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``view`` with the signed-in account; otherwise go to the sign-in page. A revoked key
    ends its sessions at once; a read key may only post ``READING_FORMS``."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        key = _key_for_session()
        if key is None:
            session.clear()
            return redirect(url_for("web.console_login", next=request.full_path))
        account = key.account
        flask.g.console_account = account
        if request.method == "POST":
            _require_csrf()
            if key.scope != FULL and request.endpoint not in READING_FORMS:
                raise Forbidden(key.scope, FULL)
        return view(account, *args, **kwargs)

    return wrapper


def csrf_token() -> str:
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def _require_csrf() -> None:
    sent = request.form.get("csrf_token", "")
    if not sent or not hmac.compare_digest(sent, session.get("csrf", "")):
        raise FormExpired(back=_form_page())


def _form_page() -> str:
    """Where a fresh copy of the posted form is: this address when it is a page, else the
    console's first page."""
    if "GET" in request.url_rule.methods:
        return request.full_path.rstrip("?")
    return url_for("web.console_home")


def _safe_next(target: str | None) -> str:
    # Only paths inside the console: never an open redirect.
    if target and target.startswith("/console") and not target.startswith("//"):
        return target
    return url_for("web.console_activity")


def login() -> Any:
    error = None
    if request.method == "POST":
        _require_csrf()
        key = request.form.get("api_key", "").strip()
        credential = authenticate_key(key)
        if credential is None:
            error = "That API key is unknown or revoked."
        elif credential.scope == SEND:
            error = "That API key may only send mail; sign in with a full or read key."
        else:
            session.clear()
            session["key_id"] = credential.key_id
            session["csrf"] = secrets.token_urlsafe(32)
            session.permanent = True
            return redirect(_safe_next(request.args.get("next")))
    return render_template("console/login.html", error=error), 401 if error else 200


@signed_in
def logout(account: Account) -> Any:
    session.clear()
    flash("You are signed out.")
    return redirect(url_for("web.console_login"))


def _day_bound(value: str, end: bool) -> int | None:
    if not value:
        return None
    try:
        day = datetime.strptime(value, "%Y-%m-%d").date()
    except ValueError:
        flash(f"Not a date: {value}")
        return None
    moment = datetime.combine(day, time.max if end else time.min, UTC)
    return int(moment.timestamp() * 1000)


@signed_in
def activity_page(account: Account) -> Any:
    status = request.args.get("status", "")
    status = status if status in EVENT_KINDS else ""
    filters = {
        "status": status,
        "recipient": request.args.get("recipient", "").strip(),
        "transmission": request.args.get("transmission", "").strip(),
        "since": request.args.get("since", ""),
        "until": request.args.get("until", ""),
    }
    page = records.list_activity(
        account,
        status=status or None,
        recipient=filters["recipient"] or None,
        transmission_id=filters["transmission"] or None,
        since=_day_bound(filters["since"], end=False),
        until=_day_bound(filters["until"], end=True),
        limit=50,
        cursor=request.args.get("cursor") or None,
    )
    next_url = None
    if page.next_cursor:
        next_url = url_for(
            "web.console_activity",
            **{k: v for k, v in filters.items() if v},
            cursor=page.next_cursor,
        )
    return render_template(
        "console/activity.html",
        items=page.items,
        filters=filters,
        statuses=EVENT_KINDS,
        next_url=next_url,
    )


@signed_in
def record_page(account: Account, record_id: str) -> Any:
    try:
        record = records.get_record(account, record_id)
    except NotFound:
        return render_template("console/not_found.html"), 404
    return render_template("console/record.html", record=record)


@signed_in
def recipients_page(account: Account) -> Any:
    config = current_app.config["LAYANG"]
    if request.method == "POST":
        email, name = request.form.get("email", ""), request.form.get("name", "").strip()
        try:
            address = normalize_address(email)
            if has_line_break(name) or len(name) > MAX_DISPLAY_NAME:
                raise ValueError("Not a valid name.")
            sandbox.add_authorized_recipient(account, address, name or None, config)
        except ValueError as error:  # InvalidAddress is one
            flash(f"{email}: {error}", "error")
        except LayangError as error:
            flash(error.message, "error")
        else:
            flash(f"Verification email sent to {address}.")
        return redirect(url_for("web.console_recipients"))
    page = sandbox.list_authorized_recipients(account, limit=500)
    return render_template(
        "console/recipients.html", recipients=page.items, sandbox_sender=config.sandbox_sender
    )


@signed_in
def recipient_action(account: Account, recipient_id: str, action: str) -> Any:
    config = current_app.config["LAYANG"]
    try:
        recipient = sandbox.get_authorized_recipient(account, recipient_id)
        if action == "resend":
            sandbox.resend_verification(account, recipient_id, config)
            flash(f"A new verification email is on its way to {recipient.email}.")
        else:
            sandbox.delete_authorized_recipient(account, recipient_id)
            flash(f"{recipient.email} was removed.")
    except LayangError as error:
        flash(error.message, "error")
    return redirect(url_for("web.console_recipients"))


@signed_in
def templates_page(account: Account) -> Any:
    page = templates_store.list_templates(account.id, limit=500)
    return render_template("console/templates.html", templates=page.items)


def _sample_data(raw: str) -> tuple[dict[str, Any], str | None]:
    if not raw.strip():
        return {}, None
    too_deep = f"Sample data is nested more than {MAX_NESTING} levels deep."
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        return {}, f"Sample data is not valid JSON: {error.msg} (line {error.lineno})."
    except RecursionError:
        return {}, too_deep
    if not isinstance(data, dict):
        return {}, "Sample data must be a JSON object."
    if nested_too_deep(data):
        return {}, too_deep
    return data, None


@signed_in
def template_page(account: Account, template_id: str) -> Any:
    try:
        record = templates_store.get_template(account.id, template_id)
    except templates_store.TemplateNotFound:
        return render_template("console/not_found.html"), 404
    raw = request.form.get("data", "") if request.method == "POST" else ""
    rendered = error = preview_url = None
    if request.method == "POST":
        data, error = _sample_data(raw)
        if error is None:
            try:
                rendered = templates_store.preview(account.id, template_id, data)
            except templates_store.TemplateStoreError as failure:
                error = str(failure)
        if rendered is not None and rendered.body_html is not None:
            encoded = base64.urlsafe_b64encode(raw.encode()).decode()
            if len(encoded) <= PREVIEW_DATA_MAX:
                preview_url = url_for(
                    "web.console_template_html", template_id=template_id, data=encoded
                )
    return render_template(
        "console/template.html",
        template=record,
        sample=raw,
        rendered=rendered,
        error=error,
        preview_url=preview_url,
    )


@signed_in
def template_html(account: Account, template_id: str) -> Any:
    """The rendered HTML alone, for the preview frame: it may style itself but never run code
    or be framed by another site."""
    try:
        raw = base64.urlsafe_b64decode(request.args.get("data", "")).decode()
    except (binascii.Error, UnicodeDecodeError):
        raw = ""
    data, _ = _sample_data(raw)
    try:
        rendered = templates_store.preview(account.id, template_id, data)
    except templates_store.TemplateStoreError:
        flask.abort(404)
    response = flask.Response(rendered.body_html or "", mimetype="text/html")
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; style-src 'unsafe-inline'; img-src http: https: data:; "
        "frame-ancestors 'self'; sandbox"
    )
    response.headers["X-Frame-Options"] = "SAMEORIGIN"
    return response


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
        "console/domains.html", domains=page.items, split_txt=sending_domains.split_txt
    )


@signed_in
def domain_action(account: Account, domain: str, action: str, selector: str = "") -> Any:
    config = current_app.config["LAYANG"]
    try:
        if action == "verify":
            state = sending_domains.verify_domain(account, domain, config)
            flash(f"{state.domain}: {state.status}; every record was checked in DNS just now.")
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
        ("/", "root", lambda: redirect(url_for("web.console_home")), ["GET"]),
        ("/console", "console_home", lambda: redirect(url_for("web.console_activity")), ["GET"]),
        ("/console/login", "console_login", login, ["GET", "POST"]),
        ("/console/logout", "console_logout", logout, ["POST"]),
        ("/console/activity", "console_activity", activity_page, ["GET"]),
        ("/console/activity/<record_id>", "console_record", record_page, ["GET"]),
        ("/console/recipients", "console_recipients", recipients_page, ["GET", "POST"]),
        (
            "/console/recipients/<recipient_id>/resend",
            "console_recipient_resend",
            functools.partial(recipient_action, action="resend"),
            ["POST"],
        ),
        (
            "/console/recipients/<recipient_id>/delete",
            "console_recipient_delete",
            functools.partial(recipient_action, action="delete"),
            ["POST"],
        ),
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
        ("/console/templates", "console_templates", templates_page, ["GET"]),
        ("/console/templates/<template_id>", "console_template", template_page, ["GET", "POST"]),
        (
            "/console/templates/<template_id>/preview.html",
            "console_template_html",
            template_html,
            ["GET"],
        ),
    ]
    for rule, endpoint, view, methods in rules:
        blueprint.add_url_rule(rule, endpoint, view, methods=methods)
    blueprint.add_app_template_global(csrf_token, "csrf_token")
    blueprint.add_app_template_filter(lambda ms: iso_ms(ms)[:16].replace("T", " ") + " UTC", "when")
    blueprint.add_app_template_filter(iso_ms, "iso")
