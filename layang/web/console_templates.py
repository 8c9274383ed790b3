"""The console's Templates pages: the list, one template previewed with sample data (its HTML
in a sandboxed frame), created, edited (a save over someone else's shows theirs first) and
deleted. The same template store as ``/v1/layang/templates``."""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Callable
from typing import Any

import flask
from flask import flash, redirect, render_template, request, url_for

import templates_store
from layang.mail.message import MAX_NESTING, nested_too_deep
from layang.models import Account
from layang.web.console import signed_in

PREVIEW_DATA_MAX = 64 * 1024


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


def register(blueprint: flask.Blueprint) -> None:
    rules: list[tuple[str, str, Callable[..., Any], list[str]]] = [
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
