"""``/console``: the web console. Server-rendered pages over the same domain functions as the
API; every page shows only the signed-in account's data.

Here what every page shares: who is signed in and what their role or key may do
(``signed_in``), the forms' CSRF token, the audit entry a changing form leaves
(``record_change``) and the templates' filters. The pages are in ``console_<page>.py``."""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import flask
from flask import current_app, flash, redirect, render_template, request, session, url_for

from layang.clock import iso_ms
from layang.domain.errors import Forbidden, RoleNeeded
from layang.mail.idn import display_form
from layang.models import ADMIN, DEVELOPER, FULL, OWNER, READ, VIEWER, Account
from layang.team import audit, key_sessions, people, sessions
from layang.web.csrf import FormExpired
from layang.web.line_breaks import reply_gist, with_breaks

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
    ]
    for rule, endpoint, view, methods in rules:
        blueprint.add_url_rule(rule, endpoint, view, methods=methods)
    blueprint.after_request(record_change)
    blueprint.add_app_template_global(csrf_token, "csrf_token")
    blueprint.add_app_template_filter(with_breaks, "breaks")
    # Domains are stored as A-labels (xn--…) and shown as their U-labels.
    blueprint.add_app_template_filter(display_form, "unicode")
    blueprint.add_app_template_filter(reply_gist, "reply_gist")
    blueprint.add_app_template_filter(lambda ms: iso_ms(ms)[:16].replace("T", " ") + " UTC", "when")
    blueprint.add_app_template_filter(iso_ms, "iso")
