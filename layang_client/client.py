"""The client: one service and API key, the send call, and the retry policy every call follows."""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

import httpx

from layang_client.defaults import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_MAX_RETRIES,
    DEFAULT_MAX_RETRY_WAIT,
    DEFAULT_RETRY_BACKOFF,
    DEFAULT_TIMEOUT,
    USER_AGENT,
    default_base_url,
)
from layang_client.errors import _connection_error, error_from_response
from layang_client.payload import (
    Address,
    Addresses,
    Attachment,
    Headers,
    Recipients,
    _address,
    _addresses,
    _attachment,
    _headers,
    _recipients,
    _timestamp,
)
from layang_client.resources import (
    Activity,
    AuthorizedRecipients,
    Domains,
    Inbound,
    Suppressions,
    Templates,
    TrackingDomains,
    Transmissions,
    Webhooks,
)
from layang_client.transport import (
    _NOT_SENT,
    _RETRYABLE_5XX,
    _TRANSIENT,
    API_PREFIX,
    IDEMPOTENCY_HEADER,
    _decode,
)


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
        self.tracking_domains = TrackingDomains(self)
        self.suppressions = Suppressions(self)

        self.webhooks = Webhooks(self)
        self.inbound = Inbound(self)

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
        to: Recipients,
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
        tags: Iterable[str] | None = None,
        scheduled_at: datetime | str | None = None,
    ) -> str:
        """Send a message; returns its transmission id once the service has stored it.

        Give ``body_text`` and/or ``body_html`` with a ``subject``, or a ``template_id``
        (with ``substitution_data``; the template's subject is used unless ``subject`` is
        given). Addresses are ``"a@x"``, ``"Name <a@x>"`` or ``{"email", "name"}``; ``to``,
        ``cc``, ``bcc`` and ``reply_to`` take one or a list. A ``to`` mapping may carry
        ``substitution_data`` and ``metadata`` of that recipient's own, merged over the
        send's for its copy and its record alone. Attachments are file paths,
        ``(filename, bytes[, mime])`` tuples, ``{"filename", "content": bytes}`` or
        ``{"filename", "value": base64, "mimeType"}``. ``headers`` maps names to values.
        ``transactional=False`` marks mail people may unsubscribe from (one-click unsubscribe
        headers are added); recipients on the suppression list are never sent to. ``tags``
        (at most 10 strings of 1 to 64 characters) label the message's records and webhook
        events, and filter Activity (``client.activity.list(tag=)``). ``scheduled_at`` (a
        datetime, naive ones UTC, or ISO 8601; at most 30 days ahead) holds the message until
        then: ``client.transmissions.cancel(tid)`` or ``.reschedule(tid, when)`` before it.

        ``idempotency_key`` (1 to 255 printable ASCII characters) makes a repeat of this
        call within 24 hours return the first one's transmission id instead of sending again,
        say after your process restarted; without it, a key is made for this call, so its own
        retries (see :class:`Layang`) never send twice.
        """
        body: dict[str, Any] = {"from": _address(from_), "to": _recipients(to)}
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
        if tags is not None:
            body["tags"] = list(tags)
        if scheduled_at is not None:
            body["scheduledAt"] = _timestamp(scheduled_at)
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
