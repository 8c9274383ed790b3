"""CSRF tokens for forms: signed with the secret key and bound to what the form acts on."""

from __future__ import annotations

import hmac

from flask import current_app
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from werkzeug.exceptions import BadRequest

MAX_AGE_SECONDS = 24 * 3600


class FormExpired(BadRequest):
    """A form came back without a valid CSRF token (its page was open too long, or it was
    forged): 400, answered with a link to ``back``, where a fresh form waits."""

    description = "The form expired; reload the page and try again."

    def __init__(self, back: str) -> None:
        super().__init__()
        self.back = back


def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.config["SECRET_KEY"], salt="layang-csrf")


def csrf_token(bound_to: str) -> str:
    """A token valid for a day, for forms acting on ``bound_to`` only."""
    return _serializer().dumps(bound_to)


def csrf_valid(token: str | None, bound_to: str) -> bool:
    if not token:
        return False
    try:
        value = _serializer().loads(token, max_age=MAX_AGE_SECONDS)
    except (BadSignature, SignatureExpired):
        return False
    return isinstance(value, str) and hmac.compare_digest(value, bound_to)
