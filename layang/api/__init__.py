"""The HTTP API: flask-smorest wiring, the error body, and bearer-key authentication."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, NoReturn

import flask
import flask_smorest
import marshmallow as ma
from flask import g, request
from webargs import core as webargs_core
from webargs.flaskparser import FlaskParser
from werkzeug.exceptions import HTTPException

import templates_store
from layang.api.fields import ErrorSchema
from layang.db import UNAVAILABLE_ERRORS, discard_connection, error_summary
from layang.domain.accounts import authenticate
from layang.domain.errors import (
    Conflict,
    LayangError,
    MalformedJson,
    NotFound,
    PayloadTooLarge,
    PreconditionFailed,
    ServiceUnavailable,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
)

log = logging.getLogger("layang.api")

# peewee wraps the driver's errors in its own; a driver error that escaped the wrapping (raised
# while reading a result, say) means the same thing.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = UNAVAILABLE_ERRORS
try:
    import psycopg2
except ImportError:  # PostgreSQL support is optional
    pass
else:
    DATABASE_UNAVAILABLE += (psycopg2.OperationalError, psycopg2.InterfaceError)

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


class RequestParser(FlaskParser):
    """webargs parser that speaks the contract: 400 ``validation_failed`` naming the field,
    400 ``malformed_json``, and 415 for a body that is not JSON."""

    DEFAULT_VALIDATION_STATUS = 400
    DEFAULT_UNKNOWN_BY_LOCATION: ClassVar[dict[str, str | None]] = {
        **FlaskParser.DEFAULT_UNKNOWN_BY_LOCATION,
        "query": ma.RAISE,
    }

    def _raw_load_json(self, req: flask.Request) -> Any:
        if not webargs_core.is_json(req.mimetype):
            if req.content_length or req.mimetype:
                raise UnsupportedMediaType("The request body must be application/json.")
            raise ValidationFailed("The request body is empty; send a JSON object.")
        return webargs_core.parse_json(req.get_data(cache=True))

    def _handle_invalid_json_error(self, error: Exception, req: flask.Request, *a: Any, **k: Any):
        raise MalformedJson("The request body is not valid JSON.")

    def handle_error(
        self,
        error: ma.ValidationError,
        req: flask.Request,
        schema: ma.Schema,
        *,
        error_status_code: int | None,
        error_headers: Any,
    ) -> NoReturn:
        messages = error.messages
        # webargs nests messages under the location ("json", "query"); clients want the fields.
        if isinstance(messages, dict) and len(messages) == 1:
            (location,) = messages
            if location in ("json", "query", "headers", "view_args"):
                messages = messages[location]
        if isinstance(messages, list):
            messages = {"_schema": messages}
        raise ValidationFailed(first_error(messages), messages)


class Blueprint(flask_smorest.Blueprint):
    ARGUMENTS_PARSER = RequestParser()


class Api(flask_smorest.Api):
    ERROR_SCHEMA = ErrorSchema


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
        ServiceUnavailable("The database is unavailable; try again shortly."), {"Retry-After": "5"}
    )


def handle_unexpected(error: Exception) -> flask.Response:
    if isinstance(error, HTTPException):
        return handle_http_exception(error)
    log.exception("unhandled error path=%s", request.path)
    return error_response(LayangError("An internal error occurred; it has been logged."))


def authenticate_request() -> None:
    """Every /v1 call: resolve the bearer key to ``g.account`` or answer 401."""
    if not request.path.startswith("/v1/"):
        return
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if not header:
        raise Unauthorized("Missing Authorization header; send 'Authorization: Bearer <API key>'.")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("Malformed Authorization header; expected 'Bearer <API key>'.")
    account = authenticate(secret.strip())
    if account is None:
        raise Unauthorized("The API key is unknown or revoked.")
    g.account = account


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
    app.register_error_handler(LayangError, handle_layang_error)
    app.register_error_handler(templates_store.TemplateStoreError, handle_template_error)
    app.register_error_handler(HTTPException, handle_http_exception)
    for unavailable in DATABASE_UNAVAILABLE:
        app.register_error_handler(unavailable, handle_database_unavailable)
    app.register_error_handler(Exception, handle_unexpected)


def init_api(app: flask.Flask) -> None:
    from layang.api import activity, authorized_recipients, templates, transmissions

    app.config.update(
        API_TITLE="Layang",
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="docs",
        OPENAPI_SWAGGER_UI_URL="/docs/assets/",
    )
    api = Api()
    api.init_app(
        app,
        spec_kwargs={
            "info": {"description": "Transactional email: send, templates, sandbox, activity."},
            "security": [{"bearerAuth": []}],
        },
    )
    api.spec.components.security_scheme(
        "bearerAuth", {"type": "http", "scheme": "bearer", "description": "An API key, lyg_…"}
    )
    for module in (transmissions, templates, activity, authorized_recipients):
        api.register_blueprint(module.blp, url_prefix="/v1/layang")
    app.before_request(authenticate_request)
    register_error_handlers(app)
