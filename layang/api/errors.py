"""The API's error body (contract 2.1): every non-2xx answer, in one place.

It is the application's default answer: for the API's resources, the operations paths
(``/healthz``, ``/metrics``, ``/openapi.json``, ``/docs``) and any URL nothing else claims. The
pages under ``/console`` and ``/consent`` answer their own errors (``layang.web.error_pages``).
"""

from __future__ import annotations

import logging
from typing import Any

import flask
from flask import request
from werkzeug.exceptions import HTTPException

import templates_store
from layang.db import UNAVAILABLE_ERRORS, discard_connection, error_summary
from layang.domain.errors import (
    Conflict,
    LayangError,
    NotFound,
    PayloadTooLarge,
    PreconditionFailed,
    ServiceUnavailable,
    Unauthorized,
    ValidationFailed,
)

log = logging.getLogger("layang.api")

RETRY_AFTER_SECONDS = "5"

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    412: "precondition_failed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    428: "precondition_required",
    429: "rate_limited",
    500: "internal_error",
    503: "service_unavailable",
}


def first_error(errors: Any, path: str = "") -> str:
    """``"to.0.email: Not a valid email address."`` from marshmallow's nested messages."""
    if isinstance(errors, dict):
        for key, value in errors.items():
            prefix = path if key == "_schema" else f"{path}.{key}" if path else str(key)
            return first_error(value, prefix)
    if isinstance(errors, list) and errors:
        return first_error(errors[0], path)
    return f"{path}: {errors}" if path else str(errors)


def error_response(error: LayangError, headers: dict[str, str] | None = None) -> flask.Response:
    response = flask.jsonify(error.to_dict())
    response.status_code = error.status
    if isinstance(error, Unauthorized):
        response.headers["WWW-Authenticate"] = 'Bearer realm="layang"'
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def handle_layang_error(error: LayangError) -> flask.Response:
    return error_response(error)


def handle_http_exception(error: HTTPException) -> flask.Response:
    status = error.code or 500
    if status == 413:
        body = PayloadTooLarge("The request body is larger than this server accepts.")
        return error_response(body)
    generic = LayangError(_sentence(error))
    generic.status = status
    generic.code = _HTTP_CODES.get(status, "http_error")
    allow = getattr(error, "valid_methods", None)
    return error_response(generic, {"Allow": ", ".join(allow)} if allow else None)


def _sentence(error: HTTPException) -> str:
    if error.code == 404:
        return f"Nothing at {request.path}."
    if error.code == 405:
        return f"{request.method} is not allowed on {request.path}."
    return (error.description or error.name).split("\n")[0]


def handle_database_unavailable(error: Exception) -> flask.Response:
    """503 with Retry-After while the database is down or the connection broke.

    The connection is dropped so that the next request on this thread opens a fresh one.
    """
    log.error("database unavailable path=%s error=%s", request.path, error_summary(error))
    discard_connection()
    return error_response(
        ServiceUnavailable("The database is unavailable; try again shortly."),
        {"Retry-After": RETRY_AFTER_SECONDS},
    )


def handle_unexpected(error: Exception) -> flask.Response:
    if isinstance(error, HTTPException):
        return handle_http_exception(error)
    log.exception("unhandled error path=%s", request.path)
    return error_response(LayangError("An internal error occurred; it has been logged."))


def as_layang_error(error: templates_store.TemplateStoreError) -> LayangError:
    """The API's view of an error from the template store."""
    if isinstance(error, templates_store.TemplateSyntaxError):
        return ValidationFailed(str(error), {error.part: [str(error)]})
    if isinstance(error, templates_store.InvalidTemplate):
        return ValidationFailed(f"{error.field}: {error}", {error.field: [str(error)]})
    if isinstance(error, templates_store.RenderError):
        field = error.part or "substitutionData"
        return ValidationFailed(f"{field}: could not render: {error}", {field: [str(error)]})
    if isinstance(error, templates_store.TemplateNotFound):
        return NotFound(f"No template {request.view_args.get('template_id', '')!r}.")
    if isinstance(error, templates_store.TemplateConflict):
        return Conflict(f"id: {error}")
    if isinstance(error, templates_store.PreconditionFailed):
        return PreconditionFailed("If-Match does not match the template's current ETag.")
    return LayangError("The template store failed.")


def handle_template_error(error: templates_store.TemplateStoreError) -> flask.Response:
    return error_response(as_layang_error(error))


def register_error_handlers(app: flask.Flask) -> None:
    """Make the error body the application's default answer.

    Registered on the application, not on the API's blueprints: unknown URLs and the
    operations paths belong to no blueprint and must answer the same body. A blueprint's own
    handlers (the pages') take precedence for the requests it serves.
    """
    app.register_error_handler(LayangError, handle_layang_error)
    app.register_error_handler(templates_store.TemplateStoreError, handle_template_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    for unavailable in UNAVAILABLE_ERRORS:
        app.register_error_handler(unavailable, handle_database_unavailable)
    app.register_error_handler(Exception, handle_unexpected)
