"""The API on the wire: its URL prefix, the idempotency header, which failures a retry may
follow, ids as path segments, and JSON answers decoded."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from layang_client.errors import LayangError

API_PREFIX = "/v1/layang"
IDEMPOTENCY_HEADER = "Idempotency-Key"

# 501 and 505 mean "this server will never do that": retrying cannot help.
_RETRYABLE_5XX = frozenset((500, 502, 503, 504))

# Raised before a single byte of the request left this process: retrying cannot duplicate it.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Any failure of the exchange; only safe to retry for calls that may run twice.
_TRANSIENT = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


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
