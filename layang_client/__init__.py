"""The Layang Python SDK: a small, synchronous client for the Layang HTTP API.

It depends on the standard library and httpx only, so applications can use it without the
service's own dependencies::

    from layang.client import Layang, LayangError

    with Layang("lyg_...", base_url="http://127.0.0.1:8000") as client:
        transmission_id = client.send(
            from_="Shop <shop@example.com>", to="ana@example.org", subject="Hi", body_text="Hello"
        )

Every non-2xx answer raises a :class:`LayangError` (or one of its subclasses) carrying the
service's error body. Rate-limited (429) and failed (5xx) calls are retried with exponential
backoff where that is safe; see :class:`Layang` for the exact policy.

Where each part lives: ``client`` (the :class:`Layang` client and its retry policy),
``resources/`` (one module per namespace: ``client.templates``…), ``errors``, ``payload`` (call
arguments as JSON), ``transport`` (the API on the wire), ``defaults`` and
``webhook_verification``.
"""

from layang_client.client import Layang
from layang_client.defaults import (
    DEFAULT_BASE_URL,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_RETRY_WAIT,
    DEFAULT_PAGE_SIZE,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_TIMEOUT,
    USER_AGENT,
    __version__,
    default_base_url,
    url_of_bind,
)
from layang_client.errors import (
    AuthenticationError,
    ConflictError,
    LayangConnectionError,
    LayangError,
    LayangTimeoutError,
    NotFoundError,
    PermissionDeniedError,
    PreconditionFailedError,
    RateLimitError,
    ServerError,
    ValidationError,
    error_from_response,
    parse_retry_after,
)
from layang_client.payload import UNSET, Address, Addresses, Attachment, Headers
from layang_client.resources import (
    Activity,
    AuthorizedRecipients,
    Domains,
    Inbound,
    Suppressions,
    Templates,
    Transmissions,
    Webhooks,
)
from layang_client.transport import API_PREFIX, IDEMPOTENCY_HEADER
from layang_client.webhook_verification import WEBHOOK_TOLERANCE_SECONDS, verify_webhook

__all__ = [
    "UNSET",
    "AuthenticationError",
    "ConflictError",
    "Layang",
    "LayangConnectionError",
    "LayangError",
    "LayangTimeoutError",
    "NotFoundError",
    "PermissionDeniedError",
    "PreconditionFailedError",
    "RateLimitError",
    "ServerError",
    "ValidationError",
    "default_base_url",
    "parse_retry_after",
    "verify_webhook",
]
