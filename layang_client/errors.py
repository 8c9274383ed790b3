"""The errors a call raises, one class per kind of failure, built from the service's error
body (or from whatever else answered), and the ``Retry-After`` they carry."""

from __future__ import annotations

import email.utils
from datetime import UTC, datetime
from typing import Any

import httpx

# The codes the service uses, for answers that did not come with its JSON body (a proxy's page).
_STATUS_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    412: "precondition_failed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "unprocessable_entity",
    429: "rate_limited",
    500: "internal_error",
    502: "bad_gateway",
    503: "service_unavailable",
    504: "gateway_timeout",
}


class LayangError(Exception):
    """A call failed. The attributes mirror the service's error body.

    ``status`` is the HTTP status (None when no answer arrived), ``error`` the stable
    snake_case code (``validation_failed``, ``not_found``…), ``message`` one sentence naming
    the field or the cause, ``errors`` the field-by-field messages of a validation failure
    (nested like the request body) or None. ``retry_after`` is the delay in seconds the
    server asked for, if any; ``response`` the raw ``httpx.Response``, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        error: str = "error",
        errors: dict[str, Any] | None = None,
        retry_after: float | None = None,
        response: httpx.Response | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error = error
        self.errors = errors
        self.retry_after = retry_after
        self.response = response

    def to_dict(self) -> dict[str, Any]:
        """The error as the service's error body: ``{"error", "message", "status", "errors"?}``."""
        body: dict[str, Any] = {"error": self.error, "message": self.message, "status": self.status}
        if self.errors is not None:
            body["errors"] = self.errors
        return body

    def __str__(self) -> str:
        prefix = f"{self.status} " if self.status is not None else ""
        return f"{prefix}{self.error}: {self.message}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(status={self.status!r}, error={self.error!r}, "
            f"message={self.message!r})"
        )


class ValidationError(LayangError):
    """400 or 422: the request was refused as it stands; ``errors`` says which fields."""


class AuthenticationError(LayangError):
    """401: the API key is missing, unknown or revoked."""


class PermissionDeniedError(LayangError):
    """403: the key may not do this."""


class NotFoundError(LayangError):
    """404: no such transmission, template or recipient (in this account)."""


class ConflictError(LayangError):
    """409: the resource exists already, or is in a state that forbids the call."""


class PreconditionFailedError(LayangError):
    """412: ``If-Match`` names a version that is no longer current."""


class RateLimitError(LayangError):
    """429: too many requests; ``retry_after`` says how long to wait, when the server said."""


class ServerError(LayangError):
    """5xx: the service failed or is unavailable."""


class LayangConnectionError(LayangError):
    """No answer: the service could not be reached or the connection failed mid-call."""


class LayangTimeoutError(LayangConnectionError):
    """No answer within the configured timeout."""


_ERROR_CLASSES: dict[int, type[LayangError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    412: PreconditionFailedError,
    422: ValidationError,
    429: RateLimitError,
}


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date.

    Returns None when absent or unreadable, and never less than zero.
    """
    if value is None or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP-date is GMT by definition
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def error_from_response(response: httpx.Response) -> LayangError:
    """The :class:`LayangError` subclass for a non-2xx answer, filled from its body."""
    status = response.status_code
    cls = _ERROR_CLASSES.get(status, ServerError if status >= 500 else LayangError)
    retry_after = parse_retry_after(response.headers.get("Retry-After"))
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        errors = body.get("errors")
        return cls(
            str(body.get("message") or response.reason_phrase or body["error"]),
            status=status,
            error=body["error"],
            errors=errors if isinstance(errors, dict) else None,
            retry_after=retry_after,
            response=response,
        )
    # Not the service's body: a proxy, a load balancer or the wrong base URL answered.
    text = " ".join(response.text.split())[:200]
    reason = response.reason_phrase or "error"
    return cls(
        f"HTTP {status} {reason}" + (f": {text}" if text else ""),
        status=status,
        error=_STATUS_CODES.get(status, "http_error"),
        retry_after=retry_after,
        response=response,
    )


def _connection_error(exc: httpx.TransportError, url: str) -> LayangConnectionError:
    cls = LayangTimeoutError if isinstance(exc, httpx.TimeoutException) else LayangConnectionError
    code = "timeout" if cls is LayangTimeoutError else "connection_error"
    detail = str(exc) or type(exc).__name__
    return cls(f"Could not complete the call to {url}: {detail}", error=code)
