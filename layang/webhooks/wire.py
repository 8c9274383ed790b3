"""Webhooks on the wire: signing (Standard Webhooks), the address rule, and one POST.

A request carries ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``: ``v1,`` and
the base64 HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` keyed with the base64-decoded part of the
secret after ``whsec_``, one signature per secret in force, space-separated.

Where a request may go: only ``https://`` URLs whose host resolves to public addresses, by the
address rules every outbound connection follows (:mod:`layang.destinations.addresses`;
``allow_private`` lifts them for development and tests, and allows ``http://``). The host is
resolved at every delivery and the connection made to the very address that was checked, with
TLS still verified against the host name, so a name cannot be re-pointed between the check and
the connection.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx

from layang.destinations.addresses import (
    IpAddress,
    Refused,
    Resolver,
    host_refusal,
    numeric_ipv4_form,
    resolve,
)
from layang.models import WebhookEndpoint
from layang.sealing import unseal

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
TIMEOUT_SECONDS = 10.0
# What is kept of an endpoint's answer, as the attempt's error text.
RESPONSE_BYTES_KEPT = 4096


def new_secret() -> str:
    """A fresh signing secret, ``whsec_`` and 24 random bytes in base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode()


def secret_context(endpoint_id: str) -> str:
    """What a sealed webhook secret is bound to (see ``layang.sealing``)."""
    return f"webhook:{endpoint_id}"


def signing_secrets(endpoint: WebhookEndpoint, secret_key: str, now: int) -> list[str]:
    """The secrets that sign for ``endpoint`` now: its secret, and the one it replaced while
    that is within its day of grace. Raises ``KeyUnavailable`` when one does not open."""
    context = secret_context(endpoint.id)
    found = [unseal(endpoint.secret, secret_key, context).decode()]
    expires = endpoint.previous_secret_expires_at
    if endpoint.previous_secret is not None and expires is not None and now < expires:
        found.append(unseal(endpoint.previous_secret, secret_key, context).decode())
    return found


def signature(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` of ``body`` sent as ``webhook_id`` at ``timestamp``."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()


def signed_headers(
    secrets_in_force: Sequence[str], webhook_id: str, timestamp: int, body: bytes
) -> dict[str, str]:
    """The Standard Webhooks headers for ``body``, signed with every secret in force."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": " ".join(
            signature(secret, webhook_id, timestamp, body) for secret in secrets_in_force
        ),
        "content-type": "application/json",
        "user-agent": "Layang-Webhooks/1",
    }


# -- where a request may go ---------------------------------------------------------------------


PRIVATE_HINT = (
    " For local development, set LAYANG_WEBHOOK_ALLOW_PRIVATE=true to allow http:// and "
    "private addresses."
)


def url_problem(url: str, allow_private: bool) -> str | None:
    """Why ``url`` cannot be a webhook endpoint as written (scheme, host, an address named
    literally or in a numeric IPv4 form), or None. Names are checked when resolved, at each
    delivery. A refusal that ``LAYANG_WEBHOOK_ALLOW_PRIVATE`` would lift says so."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        return f"Not a valid URL ({error})."
    allowed = ("https", "http") if allow_private else ("https",)
    if parts.scheme not in allowed:
        hint = PRIVATE_HINT if parts.scheme == "http" else ""
        return "Must be an https:// URL." + hint
    host = parts.hostname
    if not host:
        return "The URL names no host."
    if parts.username or parts.password:
        return "Must not carry a user name or password."
    if port == 0:
        return "Port 0 is not a port."
    refusal = host_refusal(host, allow_private)
    if refusal is None:
        return None
    if numeric_ipv4_form(host):
        return (
            f"{refusal}; write an address as four decimal numbers (such as 192.0.2.10) "
            "or use a host name."
        )
    hint = PRIVATE_HINT if host_refusal(host, True) is None else ""
    return f"{refusal}; use a public address." + hint


# -- one POST -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PostResult:
    """What an endpoint answered: ``status`` (None when no answer came) and, unless the
    answer was a 2xx, ``error`` (the start of its body, or what went wrong)."""

    status: int | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


async def post(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    body: bytes,
    *,
    allow_private: bool,
    resolver: Resolver,
    timeout: float = TIMEOUT_SECONDS,
) -> PostResult:
    """POST ``body`` to ``url``, connecting to the address checked by ``resolve`` (never
    following a redirect) and reading at most ``RESPONSE_BYTES_KEPT`` of the answer, all of it
    (resolving, connecting, sending, reading) within ``timeout``."""
    problem = url_problem(url, allow_private)
    if problem:
        return PostResult(None, problem)
    try:
        async with asyncio.timeout(timeout):
            return await _post(client, url, headers, body, allow_private, resolver, timeout)
    except TimeoutError:
        return PostResult(None, f"timed out after {timeout:g} s")


async def _post(
    client: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    body: bytes,
    allow_private: bool,
    resolver: Resolver,
    timeout: float,
) -> PostResult:
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        address = await resolve(host, port, allow_private, resolver)
    except Refused as error:
        return PostResult(None, f"refused: {error}")
    literal = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    host_header = parts.netloc.rpartition("@")[2]
    request = client.build_request(
        "POST",
        target,
        content=body,
        headers={**headers, "host": host_header},
        timeout=timeout,
        # TLS names and verifies the host, not the address connected to.
        extensions={"sni_hostname": host},
    )
    try:
        response = await client.send(request, stream=True, follow_redirects=False)
    except httpx.TimeoutException:
        return PostResult(None, f"timed out after {timeout:g} s")
    except httpx.HTTPError as error:
        return PostResult(None, _without_address(f"{type(error).__name__}: {error}", address))
    try:
        kept = b""
        try:
            async for chunk in response.aiter_raw():
                kept += chunk
                if len(kept) >= RESPONSE_BYTES_KEPT:
                    break
        except httpx.HTTPError:
            pass  # the status is what counts; the body is only kept as a hint
    finally:
        await response.aclose()
    if 200 <= response.status_code < 300:
        return PostResult(response.status_code, None)
    text = kept[:RESPONSE_BYTES_KEPT].decode("utf-8", "replace")
    return PostResult(response.status_code, text or f"HTTP {response.status_code}")


def _without_address(error: str, address: IpAddress) -> str:
    """A connection error's text, kept short, with the address connected to left out (the
    URL names the host; the address it resolved to is not the account's to learn)."""
    return error.replace(str(address), "the endpoint")[:RESPONSE_BYTES_KEPT]
