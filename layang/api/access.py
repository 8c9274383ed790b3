"""Who may do what, and how much: key scopes and the rate limit's headers (docs/api.md,
"Idempotency, rate limits, key scopes").

Every ``/v1`` operation needs one scope, decided here and nowhere else: reading (GET, HEAD)
needs ``read``, sending mail needs ``send``, everything else ``full``; a ``full`` key may do
anything. A new endpoint is covered by these rules without being listed.
"""

from __future__ import annotations

import flask
from flask import current_app, g, request

from layang.domain.errors import Forbidden
from layang.domain.rate_limits import quota
from layang.models import FULL, READ, SEND

# The operations that submit mail: all a send key may do.
SEND_OPERATIONS = frozenset({("POST", "transmissions.Transmissions")})
_READING = frozenset({"GET", "HEAD", "OPTIONS"})


def scope_needed(method: str, endpoint: str | None) -> str:
    """The scope an API key needs for ``method`` on the view ``endpoint``."""
    if (method, endpoint) in SEND_OPERATIONS:
        return SEND
    return READ if method in _READING else FULL


def require_scope() -> None:
    """Every /v1 call, once authenticated: refuse with 403 ``forbidden`` what the key's scope
    does not allow. Unknown URLs and methods are left to their 404 and 405."""
    credential = g.get("credential")
    if credential is None or request.url_rule is None or request.routing_exception is not None:
        return
    needed = scope_needed(request.method, request.endpoint)
    if not credential.allows(needed):
        raise Forbidden(credential.scope, needed)


def add_rate_limit_headers(response: flask.Response) -> flask.Response:
    """``RateLimit-Limit``, ``-Remaining`` and ``-Reset`` on every /v1 answer to an account,
    when a rate limit is set."""
    limit = current_app.config["LAYANG"].rate_limit
    account = g.get("account")
    if limit is None or account is None:
        return response
    standing = quota(account, limit)
    response.headers["RateLimit-Limit"] = str(standing.limit)
    response.headers["RateLimit-Remaining"] = str(standing.remaining)
    response.headers["RateLimit-Reset"] = str(standing.reset_seconds)
    return response
