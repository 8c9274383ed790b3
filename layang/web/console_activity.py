"""The console's Activity pages: every recipient's record, filtered and paged (newest first),
one record's timeline with its message, and that message's HTML in a sandboxed frame. The same
domain functions as ``/v1/layang/activity``."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import flask
from flask import flash, render_template, request, url_for

from layang.domain import message_view, records
from layang.domain.errors import MessageUnavailable, NotFound
from layang.mail.message import MAX_TAG_LENGTH
from layang.models import EVENT_KINDS, Account
from layang.web.console import day_bound, signed_in

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


def register(blueprint: flask.Blueprint) -> None:
    rules: list[tuple[str, str, Callable[..., Any], list[str]]] = [
        ("/console/activity", "console_activity", activity_page, ["GET"]),
        ("/console/activity/<record_id>", "console_record", record_page, ["GET"]),
        (
            "/console/activity/<record_id>/message.html",
            "console_message_html",
            message_html,
            ["GET"],
        ),
    ]
    for rule, endpoint, view, methods in rules:
        blueprint.add_url_rule(rule, endpoint, view, methods=methods)
    blueprint.add_app_template_filter(detail_label, "detail_label")
