"""The HTTP API: flask-smorest wiring and bearer-key authentication; its error body is in
``layang.api.errors``."""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

import flask
import flask_smorest
import marshmallow as ma
from flask import g, request
from webargs import core as webargs_core
from webargs.flaskparser import FlaskParser

from layang.api import access, idempotency
from layang.api.body import json_source
from layang.api.docs import register_docs
from layang.api.errors import (
    MalformedJson,
    Unauthorized,
    UnsupportedMediaType,
    ValidationFailed,
    first_error,
    register_error_handlers,
)
from layang.api.fields import ErrorSchema
from layang.config import Config
from layang.domain.accounts import authenticate_key
from layang.mail.message import MAX_NESTING


def service_config() -> Config:
    """The configuration the app was built with (``create_app``)."""
    return flask.current_app.config["LAYANG"]


class RequestParser(FlaskParser):
    """webargs parser that answers as docs/api.md, "Errors", says: 400 ``validation_failed`` naming
    the field, 400 ``malformed_json``, and 415 for a body that is not JSON."""

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
        source = json_source(req)
        try:
            return webargs_core.parse_json(source)
        except RecursionError:
            raise MalformedJson(
                f"The request body is nested too deeply (at most {MAX_NESTING} levels)."
            ) from None

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


def authenticate_request() -> None:
    """Every /v1 call: resolve the bearer key to ``g.account`` (and ``g.credential``, with its
    scope) or answer 401."""
    if not request.path.startswith("/v1/"):
        return
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if not header:
        raise Unauthorized("Missing Authorization header; send 'Authorization: Bearer <API key>'.")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthorized("Malformed Authorization header; expected 'Bearer <API key>'.")
    credential = authenticate_key(secret.strip())
    if credential is None:
        raise Unauthorized("The API key is unknown or revoked.")
    g.credential = credential
    g.account = credential.account


def init_api(app: flask.Flask) -> None:
    from layang.api import (
        account,
        activity,
        audit,
        authorized_recipients,
        domains,
        inbound,
        queue,
        recipients,
        suppressions,
        team,
        templates,
        tracking_domains,
        transmissions,
        webhooks,
    )

    app.config.update(
        API_TITLE="Layang",
        API_VERSION="v1",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
    )
    api = Api()
    api.init_app(
        app,
        spec_kwargs={
            "info": {
                "description": "Transactional email over HTTP: send messages (transmissions), "
                "stored templates, every email's activity and events, sandbox authorized "
                "recipients, sending domains with DKIM, suppressions (the suppression list), "
                "webhooks, tracking domains (your own name for tracked links), the queue (mail "
                "waiting, by recipient domain and its site), inbound routing (mail to your own "
                "domains, posted to your endpoint as signed JSON), the account's retention, "
                "erasing a recipient's data, the team (invitations of people to the console) and "
                "the audit log of changes. Sends may be scheduled, batched, tagged and "
                "personalised per recipient. "
                "Authenticate with an API key as a Bearer token; errors name their field."
            },
            "security": [{"bearerAuth": []}],
        },
    )
    api.spec.components.security_scheme(
        "bearerAuth", {"type": "http", "scheme": "bearer", "description": "An API key, lyg_…"}
    )
    for module in (
        transmissions,
        templates,
        activity,
        authorized_recipients,
        domains,
        suppressions,
        webhooks,
        queue,
        account,
        recipients,
        audit,
        team,
        tracking_domains,
        inbound,
    ):
        api.register_blueprint(module.blp, url_prefix="/v1/layang")
    app.before_request(authenticate_request)
    app.before_request(access.require_scope)
    app.before_request(idempotency.claim_or_replay)
    app.after_request(idempotency.release_unanswered)
    app.after_request(access.add_rate_limit_headers)
    app.after_request(audit.record_change)
    idempotency.wrap_views(
        app, sorted({r.endpoint for r in app.url_map.iter_rules() if r.rule.startswith("/v1/")})
    )
    register_error_handlers(app)
    register_docs(app)
