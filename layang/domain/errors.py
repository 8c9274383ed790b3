"""Domain errors. Each maps to one HTTP status and one stable code of the error body; the web
layer turns them into that body in one place."""

from __future__ import annotations

from typing import Any


class LayangError(Exception):
    status = 500
    code = "internal_error"

    def __init__(self, message: str, errors: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.code, "message": self.message, "status": self.status}
        if self.errors is not None:
            body["errors"] = self.errors
        return body


class ValidationFailed(LayangError):
    status = 400
    code = "validation_failed"


class MalformedJson(LayangError):
    status = 400
    code = "malformed_json"


class Unauthorized(LayangError):
    status = 401
    code = "unauthorized"


class NotFound(LayangError):
    status = 404
    code = "not_found"


class TemplateNotFound(NotFound):
    code = "template_not_found"


class Conflict(LayangError):
    status = 409
    code = "conflict"


class PreconditionFailed(LayangError):
    status = 412
    code = "precondition_failed"


class PayloadTooLarge(LayangError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaType(LayangError):
    status = 415
    code = "unsupported_media_type"


class RecipientNotAuthorized(LayangError):
    status = 422
    code = "recipient_not_authorized"


class SenderNotAllowed(LayangError):
    status = 422
    code = "sender_not_allowed"


class ServiceUnavailable(LayangError):
    status = 503
    code = "service_unavailable"
