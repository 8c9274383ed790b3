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
"""

from __future__ import annotations

import base64
import email.utils
import enum
import hashlib
import hmac
import json as jsonlib
import mimetypes
import os
import platform
import random
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, TypeAlias
from urllib.parse import quote

import httpx

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

DEFAULT_BASE_URL = "http://127.0.0.1:8000"
_LISTEN_ON_ALL = frozenset(("0.0.0.0", "::", ""))  # noqa: S104 - compared against, never bound
DEFAULT_TIMEOUT = 30.0
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_MAX_RETRIES = 3
DEFAULT_RETRY_BACKOFF = 0.5
DEFAULT_MAX_RETRY_WAIT = 30.0
DEFAULT_PAGE_SIZE = 100
API_PREFIX = "/v1/layang"
IDEMPOTENCY_HEADER = "Idempotency-Key"

# 501 and 505 mean "this server will never do that": retrying cannot help.
_RETRYABLE_5XX = frozenset((500, 502, 503, 504))

# Raised before a single byte of the request left this process: retrying cannot duplicate it.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Any failure of the exchange; only safe to retry for calls that may run twice.
_TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)

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


def _package_version() -> str:
    try:
        return importlib_metadata.version("layang")
    except importlib_metadata.PackageNotFoundError:
        return "unknown"


__version__ = _package_version()
USER_AGENT = (
    f"layang-python/{__version__} httpx/{httpx.__version__} python/{platform.python_version()}"
)


# -- errors ---------------------------------------------------------------------------------


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


# -- request building -----------------------------------------------------------------------

Address: TypeAlias = str | Mapping[str, str]
"""``"a@x.example"``, ``"Name <a@x.example>"`` or ``{"email": ..., "name": ...}``."""
Addresses: TypeAlias = Address | Iterable[Address]
Attachment: TypeAlias = (
    Mapping[str, Any] | str | os.PathLike[str] | tuple[str, bytes] | tuple[str, bytes, str]
)
Headers: TypeAlias = Mapping[str, str] | Iterable[tuple[str, str]]


class _Unset(enum.Enum):
    UNSET = enum.auto()


UNSET = _Unset.UNSET
"""Default of :meth:`Templates.update` fields: leave the field as it is (None removes it)."""


def _address(value: Address) -> dict[str, str]:
    if isinstance(value, Mapping):
        if "email" not in value:
            raise TypeError(f"an address mapping needs an 'email' key, got {dict(value)!r}")
        result = {"email": value["email"]}
        if value.get("name"):
            result["name"] = value["name"]
        return result
    if isinstance(value, str):
        name, addr = email.utils.parseaddr(value)
        # Anything parseaddr cannot read goes as given: the service names the bad field.
        result = {"email": addr or value.strip()}
        if name and addr:
            result["name"] = name
        return result
    raise TypeError(f"an address is a str or a mapping with 'email', not {type(value).__name__}")


def _addresses(value: Addresses) -> list[dict[str, str]]:
    if isinstance(value, str | Mapping):
        return [_address(value)]
    return [_address(item) for item in value]


def _guess_mime(filename: str) -> str:
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return base64.b64encode(raw).decode("ascii")


def _attachment(value: Attachment) -> dict[str, str]:
    if isinstance(value, Mapping):
        if "filename" not in value:
            raise TypeError("an attachment mapping needs a 'filename'")
        filename = str(value["filename"])
        mime = value.get("mimeType") or value.get("mime_type")
        if "content" in value:
            encoded = _b64(value["content"])
        elif "value" in value:
            encoded = str(value["value"])
        else:
            raise TypeError(f"attachment {filename!r} needs 'content' (bytes) or 'value' (Base64)")
        return {"filename": filename, "value": encoded, "mimeType": mime or _guess_mime(filename)}
    if isinstance(value, tuple):
        if len(value) not in (2, 3):
            raise TypeError("an attachment tuple is (filename, bytes) or (filename, bytes, mime)")
        filename, content = str(value[0]), value[1]
        mime = value[2] if len(value) == 3 else _guess_mime(filename)
        return {"filename": filename, "value": _b64(content), "mimeType": mime}
    if isinstance(value, str | os.PathLike):
        path = Path(value)
        return {
            "filename": path.name,
            "value": _b64(path.read_bytes()),
            "mimeType": _guess_mime(path.name),
        }
    raise TypeError(
        "an attachment is a path, a (filename, bytes[, mime]) tuple or a mapping, "
        f"not {type(value).__name__}"
    )


def _headers(value: Headers) -> list[dict[str, str]]:
    pairs = value.items() if isinstance(value, Mapping) else value
    return [{"name": str(name), "value": str(content)} for name, content in pairs]


def _quoted_etag(etag: str) -> str:
    etag = etag.strip()
    if etag == "*" or etag.startswith(('"', "W/")):
        return etag
    return f'"{etag}"'


def url_of_bind(bind: str) -> str:
    """``http://`` + a service's listen address (``host:port``), with a listen-on-all address
    replaced by the loopback one, which a local client can connect to."""
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    if host in _LISTEN_ON_ALL:
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def default_base_url(environ: Mapping[str, str] | None = None) -> str:
    """The service a client talks to when not told: ``$LAYANG_BASE_URL``, else the service on
    this machine at ``$LAYANG_HTTP_BIND``, else ``http://127.0.0.1:8000``."""
    environ = os.environ if environ is None else environ
    if environ.get("LAYANG_BASE_URL"):
        return environ["LAYANG_BASE_URL"]
    if environ.get("LAYANG_HTTP_BIND"):
        return url_of_bind(environ["LAYANG_HTTP_BIND"])
    return DEFAULT_BASE_URL


def _timestamp(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


# -- the client -----------------------------------------------------------------------------


class Layang:
    """A client for one Layang service and API key.

    ``api_key`` defaults to ``$LAYANG_API_KEY`` (or ``$LAYANG_KEY``) and ``base_url`` to
    ``$LAYANG_BASE_URL``, else the service at ``$LAYANG_HTTP_BIND``, else
    ``http://127.0.0.1:8000``. ``timeout`` is in seconds for the whole exchange, with at most
    10 s to connect; pass an ``httpx.Timeout`` for finer control. ``http_client`` lets you
    bring a configured ``httpx.Client`` (proxies, TLS, transports); it is then yours to close,
    and its own timeouts apply unless ``timeout`` is given.

    Retries: an answer of 429 or 500/502/503/504, or a failed connection, is retried up to
    ``max_retries`` times, waiting ``retry_backoff`` seconds and doubling each time (with
    jitter), or as long as a ``Retry-After`` header asks. No single wait exceeds
    ``max_retry_wait``: a longer ``Retry-After`` fails the call at once, its error's
    ``retry_after`` telling when to come back.

    Only calls that may safely run twice are retried on every such failure: reads, updates,
    deletes, previews and sends. A send carries an ``Idempotency-Key`` (yours, or one made
    for the call) that every retry repeats, so the service accepts the message once however
    often it is retried; a retry that finds the first attempt still being processed waits and
    tries again. Other calls that create something (``templates.create``,
    ``authorized_recipients.add`` and ``.resend``) are retried only when the request
    certainly was not processed: on 429 (refused before processing) and when the connection
    could not be opened.

    Use it as a context manager, or call :meth:`close`. It is safe to share between threads.
    """

    def __init__(
        self,
        api_key: str | None = None,
        *,
        base_url: str | None = None,
        timeout: float | httpx.Timeout | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
        max_retry_wait: float = DEFAULT_MAX_RETRY_WAIT,
        http_client: httpx.Client | None = None,
    ) -> None:
        # LAYANG_KEY: the name older READMEs and `layang run` printed.
        api_key = api_key or os.environ.get("LAYANG_API_KEY") or os.environ.get("LAYANG_KEY")
        if not api_key:
            raise ValueError("an API key is required: pass api_key or set LAYANG_API_KEY")
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        self._api_key = api_key
        base_url = base_url or default_base_url()
        self.base_url = base_url.rstrip("/")
        self.max_retries = max_retries
        self.retry_backoff = retry_backoff
        self.max_retry_wait = max_retry_wait
        self._timeout: httpx.Timeout | None
        if isinstance(timeout, httpx.Timeout):
            self._timeout = timeout
        elif timeout is not None:
            self._timeout = httpx.Timeout(timeout, connect=min(timeout, DEFAULT_CONNECT_TIMEOUT))
        else:
            self._timeout = None
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(
            timeout=self._timeout or httpx.Timeout(DEFAULT_TIMEOUT, connect=DEFAULT_CONNECT_TIMEOUT)
        )
        self.transmissions = Transmissions(self)
        self.activity = Activity(self)
        self.templates = Templates(self)
        self.authorized_recipients = AuthorizedRecipients(self)
        self.domains = Domains(self)
        self.suppressions = Suppressions(self)

        self.webhooks = Webhooks(self)

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Release the connections (an injected ``http_client`` is left open)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Layang:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Layang(base_url={self.base_url!r})"

    # -- sending ---------------------------------------------------------------------------

    def send(
        self,
        *,
        from_: Address,
        to: Addresses,
        subject: str | None = None,
        body_text: str | None = None,
        body_html: str | None = None,
        cc: Addresses | None = None,
        bcc: Addresses | None = None,
        reply_to: Addresses | None = None,
        attachments: Iterable[Attachment] | None = None,
        headers: Headers | None = None,
        metadata: Mapping[str, Any] | None = None,
        template_id: str | None = None,
        substitution_data: Mapping[str, Any] | None = None,
        open_tracking: bool | None = None,
        click_tracking: bool | None = None,
        transactional: bool | None = None,
        idempotency_key: str | None = None,
    ) -> str:
        """Send a message; returns its transmission id once the service has stored it.

        Give ``body_text`` and/or ``body_html`` with a ``subject``, or a ``template_id``
        (with ``substitution_data``; the template's subject is used unless ``subject`` is
        given). Addresses are ``"a@x"``, ``"Name <a@x>"`` or ``{"email", "name"}``; ``to``,
        ``cc``, ``bcc`` and ``reply_to`` take one or a list. Attachments are file paths,
        ``(filename, bytes[, mime])`` tuples, ``{"filename", "content": bytes}`` or
        ``{"filename", "value": base64, "mimeType"}``. ``headers`` maps names to values.
        ``transactional=False`` marks mail people may unsubscribe from (one-click unsubscribe
        headers are added); recipients on the suppression list are never sent to.

        ``idempotency_key`` (1 to 255 printable ASCII characters) makes a repeat of this
        call within 24 hours return the first one's transmission id instead of sending again,
        say after your process restarted; without it, a key is made for this call, so its own
        retries (see :class:`Layang`) never send twice.
        """
        body: dict[str, Any] = {"from": _address(from_), "to": _addresses(to)}
        if subject is not None:
            body["subject"] = subject
        for key, value in (("cc", cc), ("bcc", bcc), ("replyTo", reply_to)):
            if value is not None:
                body[key] = _addresses(value)
        if body_text is not None:
            body["bodyText"] = body_text
        if body_html is not None:
            body["bodyHtml"] = body_html
        if attachments is not None:
            body["attachments"] = [_attachment(a) for a in attachments]
        if headers is not None:
            body["headers"] = _headers(headers)
        if metadata is not None:
            body["metadata"] = dict(metadata)
        if template_id is not None:
            body["templateId"] = template_id
        if substitution_data is not None:
            body["substitutionData"] = dict(substitution_data)
        options = {
            key: value
            for key, value in (
                ("openTracking", open_tracking),
                ("clickTracking", click_tracking),
                ("transactional", transactional),
            )
            if value is not None
        }
        if options:
            body["optionsAttributes"] = options
        key = idempotency_key if idempotency_key is not None else uuid.uuid4().hex
        answer = self._json(
            "POST", "/transmissions", json=body, headers={IDEMPOTENCY_HEADER: key}, idempotent=True
        )
        return str(answer["transmissionId"])

    # -- transport -------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool,
    ) -> httpx.Response:
        """One API call with the retry policy; returns a 2xx response or raises."""
        url = f"{self.base_url}{API_PREFIX}{path}"
        request_headers = {
            "Authorization": f"Bearer {self._api_key}",
            "User-Agent": USER_AGENT,
            "Accept": "application/json",
            **(headers or {}),
        }
        query = {k: v for k, v in (params or {}).items() if v is not None}
        timeout: Any = self._timeout if self._timeout is not None else httpx.USE_CLIENT_DEFAULT
        keyed = IDEMPOTENCY_HEADER in request_headers
        attempt = 0
        while True:
            try:
                response = self._http.request(
                    method, url, json=json, params=query, headers=request_headers, timeout=timeout
                )
            except httpx.TransportError as exc:
                may_retry = isinstance(exc, _NOT_SENT) or (
                    idempotent and isinstance(exc, _TRANSIENT)
                )
                if not may_retry or attempt >= self.max_retries:
                    raise _connection_error(exc, url) from exc
                delay = self._backoff(attempt)
            else:
                if response.is_success:
                    return response
                error = error_from_response(response)
                status = response.status_code
                may_retry = (
                    status == 429
                    or (idempotent and status in _RETRYABLE_5XX)
                    or (keyed and error.error == "idempotency_in_flight")
                )
                if not may_retry or attempt >= self.max_retries:
                    raise error
                if error.retry_after is None:
                    delay = self._backoff(attempt)
                elif error.retry_after > self.max_retry_wait:
                    raise error
                else:
                    delay = error.retry_after
            time.sleep(delay)
            attempt += 1

    def _backoff(self, attempt: int) -> float:
        delay = min(self.max_retry_wait, self.retry_backoff * 2**attempt)
        # Jitter spreads out clients that failed together, so they do not return together.
        return delay * random.uniform(0.5, 1.0)

    def _json(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
        idempotent: bool,
    ) -> Any:
        response = self._request(
            method, path, json=json, params=params, headers=headers, idempotent=idempotent
        )
        return _decode(response)

    def _paginate(
        self, path: str, params: Mapping[str, Any], page_size: int
    ) -> Iterator[dict[str, Any]]:
        cursor: str | None = None
        while True:
            page = self._json(
                "GET",
                path,
                params={**params, "limit": page_size, "cursor": cursor},
                idempotent=True,
            )
            yield from page["items"]
            cursor = page.get("nextCursor")
            if not cursor:
                return


def _decode(response: httpx.Response) -> Any:
    if response.status_code == 204 or not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        raise LayangError(
            f"Expected JSON from {response.request.url}, got {response.headers.get('Content-Type')}"
            " (is base_url right?)",
            status=response.status_code,
            error="invalid_response",
            response=response,
        ) from None


def _path_segment(value: str) -> str:
    """An id as one path segment, so that an id with ``/`` or ``?`` cannot reach another URL."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise ValueError(f"not a valid id: {value!r}")
    return quote(value, safe="")


class _Resource:
    def __init__(self, client: Layang) -> None:
        self._client = client


class Transmissions(_Resource):
    """``client.transmissions``: what became of a sent message."""

    def get(self, transmission_id: str) -> dict[str, Any]:
        """The transmission with every recipient's activity record, as the API returns it."""
        return self._client._json(
            "GET", f"/transmissions/{_path_segment(transmission_id)}", idempotent=True
        )


class Activity(_Resource):
    """``client.activity``: every email's delivery record, newest first."""

    def list(
        self,
        *,
        status: str | None = None,
        recipient: str | None = None,
        transmission_id: str | None = None,
        since: datetime | str | None = None,
        until: datetime | str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        recipient_contains: str | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Iterate over the matching records, newest first, fetching pages as needed.

        ``recipient`` is a whole address, ``recipient_contains`` part of one (as the console's
        search); ``status`` is one of Injection, Delay, Delivery, Bounce, Open, Click;
        ``since``/``until`` are datetimes (naive ones are UTC) or ISO 8601 strings.
        """
        params = {
            "status": status,
            "recipient": recipient,
            "recipientContains": recipient_contains,
            "transmissionId": transmission_id,
            "since": None if since is None else _timestamp(since),
            "until": None if until is None else _timestamp(until),
        }
        return self._client._paginate("/activity", params, page_size)


class Templates(_Resource):
    """``client.templates``: stored templates with shortcodes, versioned, with ETags."""

    def create(
        self,
        *,
        name: str,
        id: str | None = None,
        subject: str | None = None,
        body_html: str | None = None,
        body_text: str | None = None,
    ) -> dict[str, Any]:
        """Create a template (``id`` is generated when not given); returns it.

        Raises :class:`ConflictError` when the id is taken and :class:`ValidationError`
        naming the part and line when a part does not parse.
        """
        body: dict[str, Any] = {"name": name}
        for key, value in (
            ("id", id),
            ("subject", subject),
            ("bodyHtml", body_html),
            ("bodyText", body_text),
        ):
            if value is not None:
                body[key] = value
        return self._client._json("POST", "/templates", json=body, idempotent=False)

    def get(self, template_id: str) -> dict[str, Any]:
        """The template's current version."""
        return self.get_with_etag(template_id)[0]

    def get_with_etag(self, template_id: str) -> tuple[dict[str, Any], str | None]:
        """The template and its ETag, to pass as ``if_match`` to :meth:`update`."""
        response = self._client._request(
            "GET", f"/templates/{_path_segment(template_id)}", idempotent=True
        )
        return _decode(response), response.headers.get("ETag")

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over every template, by id, fetching pages as needed."""
        return self._client._paginate("/templates", {}, page_size)

    def update(
        self,
        template_id: str,
        *,
        name: str | _Unset = UNSET,
        subject: str | _Unset | None = UNSET,
        body_html: str | _Unset | None = UNSET,
        body_text: str | _Unset | None = UNSET,
        if_match: str | None = None,
    ) -> dict[str, Any]:
        """Save a new version; fields not given keep their value, None removes a part.

        With ``if_match`` (an ETag from :meth:`get_with_etag`) the update is refused with
        :class:`PreconditionFailedError` if the template changed meanwhile.
        """
        body = {
            key: value
            for key, value in (
                ("name", name),
                ("subject", subject),
                ("bodyHtml", body_html),
                ("bodyText", body_text),
            )
            if value is not UNSET
        }
        headers = {"If-Match": _quoted_etag(if_match)} if if_match else None
        return self._client._json(
            "PUT",
            f"/templates/{_path_segment(template_id)}",
            json=body,
            headers=headers,
            idempotent=True,
        )

    def delete(self, template_id: str) -> None:
        """Delete the template and all its versions."""
        self._client._request("DELETE", f"/templates/{_path_segment(template_id)}", idempotent=True)

    def preview(
        self, template_id: str, substitution_data: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Render the current version: ``{"subject", "bodyHtml", "bodyText"}``."""
        return self._client._json(
            "POST",
            f"/templates/{_path_segment(template_id)}/preview",
            json={"substitutionData": dict(substitution_data or {})},
            idempotent=True,
        )


class AuthorizedRecipients(_Resource):
    """``client.authorized_recipients``: who a sandbox account may send to."""

    _PATH = "/sandbox/authorized-recipients"

    def add(self, email: str, name: str | None = None) -> dict[str, Any]:
        """Add an address (``"a@x"`` or ``"Name <a@x>"``); it starts ``unverified`` and is
        sent a consent email. Raises :class:`ConflictError` if it is listed already."""
        address = _address(email)
        if name is not None:
            address["name"] = name
        return self._client._json("POST", self._PATH, json=address, idempotent=False)

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over the authorized recipients, newest first."""
        return self._client._paginate(self._PATH, {}, page_size)

    def get(self, recipient_id: str) -> dict[str, Any]:
        """One authorized recipient, with its ``status``."""
        return self._client._json(
            "GET", f"{self._PATH}/{_path_segment(recipient_id)}", idempotent=True
        )

    def delete(self, recipient_id: str) -> None:
        """Remove the recipient: the account may no longer send to it."""
        self._client._request(
            "DELETE", f"{self._PATH}/{_path_segment(recipient_id)}", idempotent=True
        )

    def resend(self, recipient_id: str) -> str:
        """Send the consent email again (the previous link stops working); returns its
        transmission id. Raises :class:`ConflictError` once consent was given."""
        answer = self._client._json(
            "POST", f"{self._PATH}/{_path_segment(recipient_id)}/resend", idempotent=False
        )
        return str(answer["transmissionId"])


class Domains(_Resource):
    """``client.domains``: sending domains, the DNS records to publish, and their DKIM keys."""

    _PATH = "/domains"

    def create(self, domain: str, *, return_path_domain: str | None = None) -> dict[str, Any]:
        """Add a domain; it starts ``pending`` with a fresh DKIM key and lists the ``records``
        to publish. Raises :class:`ConflictError` if it is added already (here or elsewhere)."""
        body = {"domain": domain}
        if return_path_domain is not None:
            body["returnPathDomain"] = return_path_domain
        return self._client._json("POST", self._PATH, json=body, idempotent=False)

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over the sending domains, newest first, as of their last check."""
        return self._client._paginate(self._PATH, {}, page_size)

    def get(self, domain: str) -> dict[str, Any]:
        """One domain, as of its last check."""
        return self._client._json("GET", f"{self._PATH}/{_path_segment(domain)}", idempotent=True)

    def verify(self, domain: str) -> dict[str, Any]:
        """Check every record in DNS now; the domain is ``verified`` once DKIM matches."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(domain)}/verify", idempotent=True
        )

    def rotate(self, domain: str) -> dict[str, Any]:
        """Add a new DKIM key, ``pending`` until its record verifies; signing moves to it then.
        Raises :class:`ConflictError` while another new key is pending."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(domain)}/dkim/rotate", idempotent=False
        )

    def delete_key(self, domain: str, selector: str) -> None:
        """Delete one DKIM key. Raises :class:`ConflictError` for the only active key."""
        self._client._request(
            "DELETE",
            f"{self._PATH}/{_path_segment(domain)}/dkim/{_path_segment(selector)}",
            idempotent=True,
        )

    def delete(self, domain: str) -> None:
        """Delete the domain and its keys: its mail is no longer signed."""
        self._client._request("DELETE", f"{self._PATH}/{_path_segment(domain)}", idempotent=True)


class Suppressions(_Resource):
    """``client.suppressions``: the addresses the account never sends to."""

    _PATH = "/suppressions"

    def list(
        self,
        *,
        reason: str | None = None,
        email: str | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> Iterator[dict[str, Any]]:
        """Iterate over the entries, newest first: only those for ``reason`` (``hard_bounce``,
        ``complaint``, ``unsubscribe``, ``manual``) and whose address contains ``email``."""
        params = {k: v for k, v in (("reason", reason), ("email", email)) if v is not None}
        return self._client._paginate(self._PATH, params, page_size)

    def get(self, email: str) -> dict[str, Any]:
        """The entry for ``email``. Raises :class:`NotFoundError` when it is not listed."""
        return self._client._json("GET", f"{self._PATH}/{_path_segment(email)}", idempotent=True)

    def add(self, email: str, *, reason: str = "manual", note: str | None = None) -> dict[str, Any]:
        """Suppress ``email`` (replacing its entry, if any) and return the entry. ``reason`` is
        ``manual`` (no mail at all) or ``unsubscribe`` (no mail sent with ``transactional``
        false)."""
        body: dict[str, Any] = {"reason": reason}
        if note is not None:
            body["note"] = note
        return self._client._json(
            "PUT", f"{self._PATH}/{_path_segment(email)}", json=body, idempotent=True
        )

    put = add

    def delete(self, email: str) -> None:
        """Take ``email`` off the list: mail to it is sent again. Raises
        :class:`NotFoundError` when it is not listed."""
        self._client._request("DELETE", f"{self._PATH}/{_path_segment(email)}", idempotent=True)


class Webhooks(_Resource):
    """``client.webhooks``: endpoints that receive every event, and their delivery attempts."""

    _PATH = "/webhooks"

    def create(
        self, url: str, events: Iterable[str] = ("*",), *, description: str | None = None
    ) -> dict[str, Any]:
        """Add an endpoint for ``events`` (types such as ``"Delivery"``, or ``"*"``). The
        answer's ``secret`` is shown only here: keep it for :func:`verify_webhook`. Raises
        :class:`ValidationError` for a URL that is not https or names a non-public address."""
        body: dict[str, Any] = {"url": url, "events": list(events)}
        if description is not None:
            body["description"] = description
        return self._client._json("POST", self._PATH, json=body, idempotent=False)

    def list(self, *, page_size: int = DEFAULT_PAGE_SIZE) -> Iterator[dict[str, Any]]:
        """Iterate over the endpoints, newest first (never their secrets)."""
        return self._client._paginate(self._PATH, {}, page_size)

    def get(self, endpoint_id: str) -> dict[str, Any]:
        """One endpoint (never its secret)."""
        return self._client._json(
            "GET", f"{self._PATH}/{_path_segment(endpoint_id)}", idempotent=True
        )

    def update(
        self,
        endpoint_id: str,
        *,
        url: str | None = None,
        events: Iterable[str] | None = None,
        enabled: bool | None = None,
    ) -> dict[str, Any]:
        """Change what is given; ``enabled=False`` stops deliveries, ``True`` resumes them."""
        body: dict[str, Any] = {}
        if url is not None:
            body["url"] = url
        if events is not None:
            body["events"] = list(events)
        if enabled is not None:
            body["enabled"] = enabled
        return self._client._json(
            "PATCH", f"{self._PATH}/{_path_segment(endpoint_id)}", json=body, idempotent=True
        )

    def delete(self, endpoint_id: str) -> None:
        """Delete the endpoint and whatever it has not received yet."""
        self._client._request(
            "DELETE", f"{self._PATH}/{_path_segment(endpoint_id)}", idempotent=True
        )

    def rotate_secret(self, endpoint_id: str) -> dict[str, Any]:
        """A new ``secret`` (in the answer, shown only there); the old one signs too for 24 h."""
        return self._client._json(
            "POST", f"{self._PATH}/{_path_segment(endpoint_id)}/rotate-secret", idempotent=False
        )

    def test(self, endpoint_id: str) -> str:
        """Queue a ``Test`` event to the endpoint; returns its event id."""
        answer = self._client._json(
            "POST", f"{self._PATH}/{_path_segment(endpoint_id)}/test", idempotent=False
        )
        return answer["eventId"]

    def deliveries(
        self, endpoint_id: str, *, page_size: int = DEFAULT_PAGE_SIZE
    ) -> Iterator[dict[str, Any]]:
        """Iterate over the endpoint's delivery attempts, newest first."""
        return self._client._paginate(
            f"{self._PATH}/{_path_segment(endpoint_id)}/deliveries", {}, page_size
        )


# -- receiving webhooks ---------------------------------------------------------------------

WEBHOOK_TOLERANCE_SECONDS = 5 * 60


def verify_webhook(
    payload: bytes | str,
    headers: Mapping[str, str],
    secret: str,
    *,
    now: float | None = None,
) -> dict[str, Any]:
    """Check a webhook request (Standard Webhooks) and return its parsed body.

    ``payload`` is the raw request body, exactly as received; ``headers`` its headers (any
    case); ``secret`` the endpoint's ``whsec_…`` secret (``ValueError`` when it is empty,
    ``None``, not a ``str``, or not one). Raises :class:`LayangError`
    (``error="invalid_signature"``) when a header is missing, the timestamp is more than five
    minutes from ``now`` (default: the clock) or no signature matches.
    """
    if not isinstance(secret, str):
        # None from an unset environment variable, or bytes: never a key to trust.
        raise ValueError("secret is missing: pass the endpoint's whsec_… secret as a str")
    try:
        key = base64.b64decode(secret.removeprefix("whsec_"), validate=True)
    except ValueError:
        raise ValueError("secret must be the endpoint's whsec_… secret") from None
    if not key:
        # An empty key signs what anyone can sign: refuse it rather than accept forgeries.
        raise ValueError("secret is empty: pass the endpoint's whsec_… secret")
    body = payload.encode() if isinstance(payload, str) else bytes(payload)
    lowered = {name.lower(): value for name, value in headers.items()}
    webhook_id = lowered.get("webhook-id")
    timestamp = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    if not (webhook_id and timestamp and signatures):
        raise _invalid("missing webhook-id, webhook-timestamp or webhook-signature header")
    try:
        sent_at = int(timestamp)
    except ValueError:
        raise _invalid("webhook-timestamp is not a number") from None
    if abs((time.time() if now is None else now) - sent_at) > WEBHOOK_TOLERANCE_SECONDS:
        raise _invalid("webhook-timestamp is more than 5 minutes away: stale or replayed")
    signed = f"{webhook_id}.{sent_at}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    for candidate in signatures.split(" "):
        version, _, value = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(value.encode(), expected.encode()):
            try:
                return jsonlib.loads(body)
            except ValueError:
                raise _invalid("the body is not JSON") from None
    raise _invalid("no signature matches the secret")


def _invalid(message: str) -> LayangError:
    return LayangError(message, error="invalid_signature")
