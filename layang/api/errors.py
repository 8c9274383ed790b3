"""The API's error body (docs/api.md, "Errors"): every non-2xx answer, in one place.

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
    Forbidden,
    IdempotencyKeyReused,
    InvalidInput,
    LayangError,
    MessageTooLarge,
    NotFound,
    RateLimited,
    RecipientNotAuthorized,
    SenderDomainNotVerified,
    SenderNotAllowed,
    SendingPaused,
    TemplateNotFound,
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


class ApiError(Exception):
    """An answer other than 2xx, as the error body describes it: ``status``, a stable ``code``,
    one ``message`` sentence and, for validation, ``errors`` nested like the request. The
    subclasses are the refusals of the HTTP layer itself; ``status`` and ``code`` may also be
    given for one answer."""

    status = 500
    code = "internal_error"

    def __init__(
        self,
        message: str,
        errors: dict[str, Any] | None = None,
        *,
        status: int | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors
        if status is not None:
            self.status = status
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message, "status": self.status}
        if self.errors is not None:
            body["errors"] = self.errors
        return body


class ValidationFailed(ApiError):
    status = 400
    code = "validation_failed"


class MalformedJson(ApiError):
    status = 400
    code = "malformed_json"


class Unauthorized(ApiError):
    status = 401
    code = "unauthorized"


class PreconditionFailed(ApiError):
    status = 412
    code = "precondition_failed"


class PayloadTooLarge(ApiError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(ApiError):
    status = 415
    code = "unsupported_media_type"


class ServiceUnavailable(ApiError):
    status = 503
    code = "service_unavailable"


_DOMAIN_STATUS: tuple[tuple[type[LayangError], int], ...] = (
    (InvalidInput, 400),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (MessageTooLarge, 413),
    (RecipientNotAuthorized, 422),
    (SenderNotAllowed, 422),
    (SenderDomainNotVerified, 422),
    (IdempotencyKeyReused, 422),
    (RateLimited, 429),
    (SendingPaused, 422),
)
# The request's names for the message fields the domain names in its errors.
_FIELD_PATHS = {
    "template_id": "templateId",
    "sender": "from",
    "reply_to": "replyTo",
    "return_path_domain": "returnPathDomain",
}
_NOT_AUTHORIZED = "Not a verified authorized recipient of this sandbox account."


def describe(error: LayangError) -> ApiError:
    """The answer to a domain error: its status, its code, and the request fields it concerns."""
    status = next((status for kind, status in _DOMAIN_STATUS if isinstance(error, kind)), None)
    if status is None:
        log.error("unmapped domain error %s: %s", type(error).__name__, error.message)
        return ApiError("An internal error occurred; it has been logged.")
    message, errors = error.message, None
    if isinstance(error, InvalidInput):
        path = _FIELD_PATHS.get(error.field, error.field)
        message, errors = f"{path}: {error.problem}", {path: [error.problem]}
    elif isinstance(error, TemplateNotFound):
        message = f"templateId: no template {error.template_id!r}."
    elif isinstance(error, SenderNotAllowed):
        message = f"from.email: sandbox accounts send from {error.allowed} only."
        errors = {"from": {"email": [error.message]}}
    elif isinstance(error, SenderDomainNotVerified):
        message = f"from.email: {error.message}"
        errors = {"from": {"email": [error.message]}}
    elif isinstance(error, RecipientNotAuthorized):
        errors = {
            kind: {str(index): {"email": [_NOT_AUTHORIZED]} for index, _ in pairs}
            for kind, pairs in error.offending.items()
        }
    return ApiError(message, errors, status=status, code=error.code)


def first_error(errors: Any, path: str = "") -> str:
    """``"to.0.email: Not a valid email address."`` from marshmallow's nested messages."""
    if isinstance(errors, dict):
        for key, value in errors.items():
            prefix = path if key == "_schema" else f"{path}.{key}" if path else str(key)
            return first_error(value, prefix)
    if isinstance(errors, list) and errors:
        return first_error(errors[0], path)
    return f"{path}: {errors}" if path else str(errors)


def error_response(error: ApiError, headers: dict[str, str] | None = None) -> flask.Response:
    response = flask.jsonify(error.body())
    response.status_code = error.status
    if isinstance(error, Unauthorized):
        response.headers["WWW-Authenticate"] = 'Bearer realm="layang"'
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def handle_api_error(error: ApiError) -> flask.Response:
    return error_response(error)


def handle_domain_error(error: LayangError) -> flask.Response:
    headers = {"Retry-After": str(error.retry_after)} if isinstance(error, RateLimited) else None
    return error_response(describe(error), headers)


def handle_http_exception(error: HTTPException) -> flask.Response:
    status = error.code or 500
    if status == 413:
        return _too_large()
    generic = ApiError(_sentence(error))
    generic.status = status
    generic.code = _HTTP_CODES.get(status, "http_error")
    allow = getattr(error, "valid_methods", None)
    return error_response(generic, {"Allow": ", ".join(allow)} if allow else None)


_DRAIN_CHUNK = 1 << 16


def _too_large() -> flask.Response:
    """413 naming the limit. The unread rest of the body is read and dropped first (up to the
    limit again): a server that closes a connection with unread input makes the client see a
    reset while it is still sending, instead of this answer."""
    limit = flask.current_app.config["MAX_CONTENT_LENGTH"]
    message_limit = flask.current_app.config["LAYANG"].max_message_bytes
    stream = request.environ.get("wsgi.input")
    declared = request.content_length
    budget = min(declared, 2 * limit) if declared is not None else 2 * limit
    if declared is None and "wsgi.input_terminated" not in request.environ:
        budget = 0  # nothing says where the body ends: reading could wait forever
    try:
        while (
            stream is not None and budget > 0 and (chunk := stream.read(min(budget, _DRAIN_CHUNK)))
        ):
            budget -= len(chunk)
    except (OSError, ValueError):
        pass
    body = PayloadTooLarge(
        f"The request body is larger than {limit} bytes, the most accepted for messages of "
        f"LAYANG_MAX_MESSAGE_BYTES={message_limit} bytes (Base64 and JSON included)."
    )
    response = error_response(body)
    response.headers["Connection"] = "close"
    return response


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
    return error_response(ApiError("An internal error occurred; it has been logged."))


def as_api_error(error: templates_store.TemplateStoreError) -> ApiError:
    """The API's view of an error from the template store."""
    if isinstance(error, templates_store.TemplateSyntaxError):
        return ValidationFailed(str(error), {error.part: [str(error)]})
    if isinstance(error, templates_store.InvalidTemplate):
        return ValidationFailed(f"{error.field}: {error}", {error.field: [str(error)]})
    if isinstance(error, templates_store.RenderError):
        field = error.part or "substitutionData"
        return ValidationFailed(f"{field}: could not render: {error}", {field: [str(error)]})
    if isinstance(error, templates_store.TemplateNotFound):
        message = f"No template {request.view_args.get('template_id', '')!r}."
        return ApiError(message, status=404, code="not_found")
    if isinstance(error, templates_store.TemplateConflict):
        return ApiError(f"id: {error}", status=409, code="conflict")
    if isinstance(error, templates_store.PreconditionFailed):
        return PreconditionFailed("If-Match does not match the template's current ETag.")
    return ApiError("The template store failed.")


def handle_template_error(error: templates_store.TemplateStoreError) -> flask.Response:
    return error_response(as_api_error(error))


def register_error_handlers(app: flask.Flask) -> None:
    """Make the error body the application's default answer.

    Registered on the application, not on the API's blueprints: unknown URLs and the
    operations paths belong to no blueprint and must answer the same body. A blueprint's own
    handlers (the pages') take precedence for the requests it serves.
    """
    app.register_error_handler(ApiError, handle_api_error)
    app.register_error_handler(LayangError, handle_domain_error)
    app.register_error_handler(templates_store.TemplateStoreError, handle_template_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    for unavailable in UNAVAILABLE_ERRORS:
        app.register_error_handler(unavailable, handle_database_unavailable)
    app.register_error_handler(Exception, handle_unexpected)
