"""``/console``: the web console. Server-rendered pages over the same domain functions as the
API; every page shows only the signed-in account's data."""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import hmac
import json
import re
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, session, url_for

import templates_store
from layang.clock import iso_ms
from layang.domain import message_view, records, sandbox, sending_domains
from layang.domain.errors import (
    Forbidden,
    LayangError,
    MessageUnavailable,
    NotFound,
    RoleNeeded,
)
from layang.mail.idn import display_form
from layang.mail.message import (
    MAX_DISPLAY_NAME,
    MAX_NESTING,
    MAX_TAG_LENGTH,
    has_line_break,
    nested_too_deep,
    normalize_address,
)
from layang.models import (
    ADMIN,
    DEVELOPER,
    EVENT_KINDS,
    FULL,
    OWNER,
    READ,
    VIEWER,
    Account,
)
from layang.team import audit, key_sessions, people, sessions
from layang.web.csrf import FormExpired
from layang.web.line_breaks import reply_gist, with_breaks

PREVIEW_DATA_MAX = 64 * 1024


# The forms a read key may post: they change nothing (signing out, previewing a template).
# Every other form needs a full key, so that a page added later is safe by default.
READING_FORMS = frozenset({"web.console_logout", "web.console_template"})

# The role a person needs (CONTRACT section 21): reading a page needs ``viewer`` and posting a
# form ``developer``, unless named here; so a page added later is safe by default. The forms
# about oneself (signing out, one's password, sessions and second factor, switching account)
# and previews need only ``viewer``.
ROLE_FOR_POST = {
    **dict.fromkeys(
        (
            "web.console_logout",
            "web.console_template",
            "web.console_switch",
            "web.console_me",
            "web.console_me_session_revoke",
            "web.console_two_factor",
            "web.console_passkeys",
        ),
        VIEWER,
    ),
    **dict.fromkeys(
        (
            "web.console_team",
            "web.console_member_role",
            "web.console_member_remove",
        ),
        ADMIN,
    ),
    "web.console_settings": OWNER,
}
ROLE_FOR_GET = {"web.console_audit": ADMIN}
# A key signed in for development acts as the role its scope matches.
KEY_ROLES = {FULL: OWNER, READ: VIEWER}


def role_needed(method: str, endpoint: str | None) -> str:
    """The least role that may use ``endpoint`` with ``method``."""
    if method in ("GET", "HEAD"):
        return ROLE_FOR_GET.get(endpoint or "", VIEWER)
    return ROLE_FOR_POST.get(endpoint or "", DEVELOPER)


def key_signin_allowed(account: Account | int) -> bool:
    """Whether an API key of ``account`` may sign in to the console: as
    ``LAYANG_CONSOLE_KEY_SIGNIN`` says, or when unset, until the account has its first user."""
    setting = current_app.config["LAYANG"].console_key_signin
    if setting is not None:
        return setting
    return not people.account_has_users(account)


def client_address() -> str:
    return (request.remote_addr or "unknown")[:64]


def _signed_in_person() -> bool:
    """Find who is signed in and put them in ``flask.g`` (``console_account``, ``console_role``,
    ``console_user``, ``console_actor``); False when nobody is."""
    user_token = session.get("user_sid")
    if user_token:
        found = sessions.session_of(user_token)
        if found is None:
            return False
        flask.g.console_user = found.user
        flask.g.console_account = found.account
        flask.g.console_role = found.role
        flask.g.console_actor = audit.user_actor(found.user.email)
        return True
    token = session.get("sid")
    key = key_sessions.session_key(token) if token else None
    if key is None or not key_signin_allowed(key.account_id):
        return False
    flask.g.console_user = None
    flask.g.console_account = key.account
    flask.g.console_role = KEY_ROLES.get(key.scope)
    flask.g.console_actor = audit.key_actor(key.id)
    flask.g.console_key = key
    return True


def signed_in(view: Callable[..., Any]) -> Callable[..., Any]:
    """Run ``view`` with the signed-in account; otherwise go to the sign-in page. A revoked key
    ends its sessions at once; a read key may only post ``READING_FORMS``; a person's role must
    allow what ``role_needed`` says, else 403 naming the role."""

    @functools.wraps(view)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _signed_in_person():
            session.clear()
            return redirect(url_for("web.console_login", next=request.full_path))
        account = flask.g.console_account
        if account is None:  # a person who belongs to no account any more
            return render_template("console/no_account.html"), 403
        if request.method == "POST":
            require_csrf()
        key = flask.g.get("console_key")
        posting = request.method == "POST" and request.endpoint not in READING_FORMS
        if key is not None and posting and key.scope != FULL:
            raise Forbidden(key.scope, FULL)
        needed = role_needed(request.method, request.endpoint)
        role = flask.g.console_role
        if role is None or not people.role_allows(role, needed):
            raise RoleNeeded(needed, role)
        return view(account, *args, **kwargs)

    return wrapper


def csrf_token() -> str:
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def require_csrf() -> None:
    """Raise ``FormExpired`` (400) unless the form carries this session's CSRF token."""
    sent = request.form.get("csrf_token", "")
    if not sent or not hmac.compare_digest(sent, session.get("csrf", "")):
        raise FormExpired(back=_form_page())


def _form_page() -> str:
    """Where a fresh copy of the posted form is: this address when it is a page, else the
    console's first page."""
    if "GET" in request.url_rule.methods:
        return request.full_path.rstrip("?")
    return url_for("web.console_home")


def safe_next(target: str | None) -> str:
    """Where to go after signing in: ``target`` when it is a console path, else Overview."""
    # Only paths inside the console: never an open redirect.
    if target and target.startswith("/console") and not target.startswith("//"):
        return target
    return url_for("web.console_overview")


def day_bound(value: str, end: bool) -> int | None:
    """A form's ``YYYY-MM-DD`` or ``YYYY-MM-DDTHH:MM`` (UTC) as epoch ms: the first or the
    last millisecond of that day or minute."""
    if not value:
        return None
    for pattern, span in (
        ("%Y-%m-%d", timedelta(days=1)),
        ("%Y-%m-%dT%H:%M", timedelta(minutes=1)),
    ):
        try:
            start = datetime.strptime(value, pattern).replace(tzinfo=UTC)
        except ValueError:
            continue
        moment = start + span - timedelta(milliseconds=1) if end else start
        return int(moment.timestamp() * 1000)
    flash(f"Not a date and time: {value}", "error")
    return None


PAGE_SIZES = (25, 50, 100, 200)

# How the timeline names the detail keys it knows; any other key shows under its own name, so
# a new kind of event needs no change here.
DETAIL_LABELS = {
    "reply": "Reply",
    "bounceClass": "Bounce class",
    "attempt": "Attempt",
    "retryAt": "Next try",
    "reason": "Reason",
    "url": "URL",
    "userAgent": "User agent",
    "source": "Received via",
    "tls": "TLS",
    "lastAt": "Last at",
    "count": "Times",
    "first": "First time",
    "status": "Status code",
}


def detail_label(key: str) -> str:
    """A detail key as words: its known label, else the key itself spelt out (``lastAt``:
    "Last at")."""
    return DETAIL_LABELS.get(key) or re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", key).capitalize()


def _metadata_filter(value: str) -> tuple[str, str] | None:
    key, equals, wanted = value.partition("=")
    if not value:
        return None
    if not equals or not key.strip():
        flash(f"Metadata filter {value!r}: write it as key=value.", "error")
        return None
    return key.strip(), wanted.strip()


def _page_size(value: str) -> int:
    return int(value) if value.isdigit() and int(value) in PAGE_SIZES else 50


@signed_in
def activity_page(account: Account) -> Any:
    args = request.args
    status = args.get("status", "")
    filters = {
        "status": status if status in EVENT_KINDS else "",
        "recipient": args.get("recipient", "").strip(),
        "subject": args.get("subject", "").strip(),
        "metadata": args.get("metadata", "").strip(),
        "tag": args.get("tag", "").strip()[:MAX_TAG_LENGTH],
        "transmission": args.get("transmission", "").strip(),
        "since": args.get("since", ""),
        "until": args.get("until", ""),
    }
    size = _page_size(args.get("size", ""))
    window = records.browse_activity(
        account,
        status=filters["status"] or None,
        transmission_id=filters["transmission"] or None,
        since=day_bound(filters["since"], end=False),
        until=day_bound(filters["until"], end=True),
        search=records.ActivitySearch(
            recipient_contains=filters["recipient"],
            subject_contains=filters["subject"],
            metadata=_metadata_filter(filters["metadata"]),
            tag=filters["tag"],
        ),
        limit=size,
        older_than=args.get("older") or None,
        newer_than=args.get("newer") or None,
    )
    start = int(args["start"]) if args.get("start", "").isdigit() else 1
    if window.newer_cursor is None:
        start = 1  # nothing newer: this is the top of the list, whatever the link said
    kept = {k: v for k, v in filters.items() if v}
    if size != 50:
        kept["size"] = str(size)
    older_url = newer_url = None
    if window.older_cursor:
        older_url = url_for(
            "web.console_activity",
            **kept,
            older=window.older_cursor,
            start=start + len(window.items),
        )
    if window.newer_cursor:
        newer_url = url_for(
            "web.console_activity",
            **kept,
            newer=window.newer_cursor,
            start=max(1, start - size),
        )
    return render_template(
        "console/activity.html",
        items=window.items,
        filters=filters,
        statuses=EVENT_KINDS,
        size=size,
        sizes=PAGE_SIZES,
        first=start,
        older_url=older_url,
        newer_url=newer_url,
    )


@signed_in
def record_page(account: Account, record_id: str) -> Any:
    try:
        record = records.get_record(account, record_id)
    except NotFound:
        return render_template("console/not_found.html"), 404
    message = problem = None
    try:
        message = message_view.get_message_view(account, record_id)
    except MessageUnavailable as error:
        problem = error.message
    images = request.args.get("images") == "1"
    return render_template(
        "console/record.html", record=record, message=message, problem=problem, images=images
    )


# The message's HTML is someone else's markup: it runs no script, submits no form, opens
# nothing, loads nothing remote unless asked (remote images tell the sender it was read), and
# only the console may frame it.
MESSAGE_CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src {images}; font-src data:; "
    "form-action 'none'; base-uri 'none'; frame-ancestors 'self'; sandbox"
)


@signed_in
def message_html(account: Account, record_id: str) -> Any:
    """The HTML part of a record's message alone, for the sandboxed frame of its page."""
    try:
        message = message_view.get_message_view(account, record_id)
    except NotFound:  # MessageUnavailable too
        flask.abort(404)
    if message.html is None:
        flask.abort(404)
    images = "data: http: https:" if request.args.get("images") == "1" else "data:"
    response = flask.Response(message.html_with_images(), mimetype="text/html")
    response.headers["Content-Security-Policy"] = MESSAGE_CSP.format(images=images)
    response.headers["Content-Disposition"] = "inline"
    response.headers["X-Frame-Options"] = "SAMEORIGIN"
    return response


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
    if request.method == "POST":
        raw = request.form.get("data", "")
    elif record.shortcodes:
        raw = json.dumps(templates_store.sample_data(record.shortcodes), indent=2)
    else:
        raw = ""
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


# Form field names are the API's, so a validation error names the same field in both.
TEMPLATE_PARTS = (("subject", "subject"), ("bodyHtml", "body_html"), ("bodyText", "body_text"))


def _template_form() -> tuple[dict[str, str], dict[str, str]]:
    """The posted template fields, and the errors found before the store sees them."""
    values = {
        name: request.form.get(name, "").replace("\r\n", "\n")
        for name in ("id", "name", "subject", "bodyHtml", "bodyText")
    }
    values["id"] = values["id"].strip()
    limit = templates_store.RenderLimits().max_part_chars
    errors = {
        name: f"At most {limit} characters."
        for name, _ in TEMPLATE_PARTS
        if len(values[name]) > limit
    }
    return values, errors


def _template_errors(error: templates_store.TemplateStoreError) -> dict[str, str]:
    """The store's refusal, by the form field it is about."""
    if isinstance(error, templates_store.TemplateSyntaxError):
        return {error.part: str(error)}
    if isinstance(error, templates_store.InvalidTemplate):
        return {error.field: error.message}
    if isinstance(error, templates_store.TemplateConflict):
        return {"id": "A template with this id exists already."}
    return {"form": str(error)}


def _parts(values: dict[str, str]) -> dict[str, str | None]:
    # An empty part is an absent part, as in the API.
    return {field: values[name] or None for name, field in TEMPLATE_PARTS}


@signed_in
def template_create(account: Account) -> Any:
    values = dict.fromkeys(("id", "name", "subject", "bodyHtml", "bodyText"), "")
    errors: dict[str, str] = {}
    if request.method == "POST":
        values, errors = _template_form()
        if not errors:
            try:
                record = templates_store.create_template(
                    account.id,
                    template_id=values["id"] or None,
                    name=values["name"],
                    **_parts(values),
                )
            except templates_store.TemplateStoreError as error:
                errors = _template_errors(error)
            else:
                flash(f"Template {record.id} was created (version 1).")
                return redirect(url_for("web.console_template", template_id=record.id))
    page = render_template(
        "console/template_form.html", values=values, errors=errors, template=None
    )
    return page, 400 if errors else 200


@signed_in
def template_edit(account: Account, template_id: str) -> Any:
    try:
        record = templates_store.get_template(account.id, template_id)
    except templates_store.TemplateNotFound:
        return render_template("console/not_found.html"), 404
    values = {
        "id": record.id,
        "name": record.name,
        "subject": record.subject or "",
        "bodyHtml": record.body_html or "",
        "bodyText": record.body_text or "",
    }
    errors: dict[str, str] = {}
    version, current = record.version, None
    if request.method == "POST":
        values, errors = _template_form()
        values["id"] = record.id
        form_version = request.form.get("version", "")
        version = int(form_version) if form_version.isdigit() else 0
        if not errors:
            try:
                saved = templates_store.update_template(
                    account.id,
                    template_id,
                    name=values["name"],
                    if_match_version=version,
                    **_parts(values),
                )
            except templates_store.PreconditionFailed:
                # Someone saved meanwhile: keep this editor's text, show theirs, and let a
                # second press save over it knowingly.
                current = templates_store.get_template(account.id, template_id)
                version = current.version
                errors = {"form": "conflict"}
            except templates_store.TemplateNotFound:
                flash(f"Template {template_id} was deleted meanwhile; nothing was saved.", "error")
                return redirect(url_for("web.console_templates"))
            except templates_store.TemplateStoreError as error:
                errors = _template_errors(error)
            else:
                flash(f"Template {template_id} was saved as version {saved.version}.")
                return redirect(url_for("web.console_template", template_id=template_id))
    page = render_template(
        "console/template_form.html",
        values=values,
        errors=errors,
        template=record,
        version=version,
        current=current,
    )
    return page, (409 if current else 400) if errors else 200


@signed_in
def template_delete(account: Account, template_id: str) -> Any:
    try:
        record = templates_store.get_template(account.id, template_id)
    except templates_store.TemplateNotFound:
        return render_template("console/not_found.html"), 404
    if request.method == "POST":
        with contextlib.suppress(templates_store.TemplateNotFound):  # gone meanwhile: fine
            templates_store.delete_template(account.id, template_id)
        flash(f"Template {template_id} was deleted.")
        return redirect(url_for("web.console_templates"))
    return render_template("console/template_delete.html", template=record)


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


# The console's forms that change the account, as audit actions (CONTRACT section 21), and the
# form field naming what changed when the address does not. The team's and keys' forms record
# themselves, with what only they know (the role before, the key's scope).
AUDITED_FORMS = {
    "web.console_recipients": ("authorized_recipient.created", "email"),
    "web.console_recipient_resend": ("authorized_recipient.resend", ""),
    "web.console_recipient_delete": ("authorized_recipient.deleted", ""),
    "web.console_domains": ("domain.created", "domain"),
    "web.console_domain_verify": ("domain.verify", ""),
    "web.console_domain_rotate": ("domain.dkim_rotated", ""),
    "web.console_domain_delete": ("domain.deleted", ""),
    "web.console_domain_key_delete": ("domain.dkim_key_deleted", ""),
    "web.console_template_create": ("template.created", "id"),
    "web.console_template_edit": ("template.updated", ""),
    "web.console_template_delete": ("template.deleted", ""),
    "web.console_suppressions": ("suppression.created", "email"),
    "web.console_suppression_remove": ("suppression.deleted", "email"),
    "web.console_webhooks": ("webhook.created", "url"),
    "web.console_webhook_test": ("webhook.test", ""),
    "web.console_webhook_enable": ("webhook.enabled", ""),
    "web.console_webhook_disable": ("webhook.disabled", ""),
    "web.console_webhook_delete": ("webhook.deleted", ""),
}
# Their target is a person's address: recorded as its SHA-256.
ADDRESSED = ("authorized_recipient.created", "suppression.created", "suppression.deleted")


def record_change(response: flask.Response) -> flask.Response:
    """After a console form that changed something (answered without an error): one audit
    entry, by the signed-in person or key, from the client's address."""
    audited = AUDITED_FORMS.get(request.endpoint or "")
    account = flask.g.get("console_account")
    if request.method != "POST" or audited is None or account is None:
        return response
    failed = response.status_code >= 400 or any(
        category == "error" for category, _ in session.get("_flashes", [])
    )
    if failed:
        return response
    action, field = audited
    args = request.view_args or {}
    target = request.form.get(field, "").strip() if field else ""
    target = target or str(args.get("selector") or next(iter(args.values()), ""))
    if action in ADDRESSED and target:
        target = audit.address_hash(target)
    audit.record(account, flask.g.console_actor, action, target, source=client_address())
    return response


def register(blueprint: flask.Blueprint) -> None:
    rules: list[tuple[str, str, Callable[..., Any], list[str]]] = [
        ("/", "root", lambda: redirect(url_for("web.console_home")), ["GET"]),
        ("/console", "console_home", lambda: redirect(url_for("web.console_overview")), ["GET"]),
        ("/console/activity", "console_activity", activity_page, ["GET"]),
        ("/console/activity/<record_id>", "console_record", record_page, ["GET"]),
        (
            "/console/activity/<record_id>/message.html",
            "console_message_html",
            message_html,
            ["GET"],
        ),
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
        ("/console/new-template", "console_template_create", template_create, ["GET", "POST"]),
        (
            "/console/templates/<template_id>/edit",
            "console_template_edit",
            template_edit,
            ["GET", "POST"],
        ),
        (
            "/console/templates/<template_id>/delete",
            "console_template_delete",
            template_delete,
            ["GET", "POST"],
        ),
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
    blueprint.after_request(record_change)
    blueprint.add_app_template_global(csrf_token, "csrf_token")
    blueprint.add_app_template_filter(detail_label, "detail_label")
    blueprint.add_app_template_filter(with_breaks, "breaks")
    # Domains are stored as A-labels (xn--…) and shown as their U-labels.
    blueprint.add_app_template_filter(display_form, "unicode")
    blueprint.add_app_template_filter(reply_gist, "reply_gist")
    blueprint.add_app_template_filter(lambda ms: iso_ms(ms)[:16].replace("T", " ") + " UTC", "when")
    blueprint.add_app_template_filter(iso_ms, "iso")
