"""Webhooks on the wire: signing (Standard Webhooks), the address rule, and one POST.

A request carries ``webhook-id``, ``webhook-timestamp`` and ``webhook-signature``: ``v1,`` and
the base64 HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` keyed with the base64-decoded part of the
secret after ``whsec_``, one signature per secret in force, space-separated.

Where a request may go: only ``https://`` URLs whose host resolves to public addresses
(``allow_private`` lifts that for development and tests, and allows ``http://``). The host is
resolved at every delivery and the connection made to the very address that was checked, with
TLS still verified against the host name, so a name cannot be re-pointed between the check and
the connection.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import re
import secrets
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import dns.asyncresolver
import dns.exception
import dns.resolver
import httpx

from layang.destinations.dns import async_resolver
from layang.models import WebhookEndpoint
from layang.sealing import unseal

SECRET_PREFIX = "whsec_"  # noqa: S105 - a prefix, not a secret
TIMEOUT_SECONDS = 10.0
# What is kept of an endpoint's answer, as the attempt's error text.
RESPONSE_BYTES_KEPT = 4096

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services: never a destination, not even with private addresses allowed, nor is
# any IPv4 link-local address (where such services live). IPv6 forms carrying an IPv4 address
# (mapped, NAT64, 6to4) are judged by that address.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",
        "169.254.170.2",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
    )
)
_LINK_LOCAL_V4 = ipaddress.ip_network("169.254.0.0/16")
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
# What a delivery error says of a refused address: never the address itself, which an account
# could use to map internal names.
REFUSED_ADDRESS = "a private address"
# A host whose last label is a number is read as an IPv4 address by URL parsers (WHATWG) and
# resolvers alike, in forms such as 2130706433, 0x7f.1, 127.1 or 0177.0.0.1.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)


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


def embedded_ipv4(address: IpAddress) -> IpAddress:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, NAT64, 6to4), else itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_refusal(address: IpAddress, allow_private: bool) -> str | None:
    """Why a request may not go to ``address``, or None when it may."""
    address = embedded_ipv4(address)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if allow_private:
        return "a link-local address" if address in _LINK_LOCAL_V4 else None
    for refused, name in (
        (address.is_loopback, "a loopback address"),
        (address.is_unspecified, "an unspecified address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address in _CGNAT, "a shared (CGNAT) address"),
        (address.is_reserved, "a reserved address"),
        (address.is_private, "a private address"),
        (not address.is_global, "not a public address"),
    ):
        if refused:
            return name
    return None


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
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        if _NUMERIC_LABEL.match(host.rstrip(".").rpartition(".")[2]):
            return (
                f"{host} is a numeric form of an IPv4 address; write an address as four "
                "decimal numbers (such as 192.0.2.10) or use a host name."
            )
        if not allow_private and (host == "localhost" or host.endswith(".localhost")):
            return f"{host} is a loopback name; use a public address." + PRIVATE_HINT
        return None
    refusal = address_refusal(address, allow_private)
    if refusal is None:
        return None
    hint = PRIVATE_HINT if address_refusal(address, True) is None else ""
    return f"{host} is {refusal}; use a public address." + hint


class Refused(Exception):
    """The endpoint's URL may not be used now (its host resolves to a refused address, or does
    not resolve)."""


class Resolver:
    """Resolves endpoints' host names: at ``servers`` (``LAYANG_DNS_RESOLVER``) when given,
    else with the system's resolver."""

    def __init__(self, servers: Sequence[tuple[str, int]] = (), timeout: float = 5.0) -> None:
        self.dns: dns.asyncresolver.Resolver | None = None
        if servers:
            # Not cached: every delivery checks what the name points at now.
            self.dns = async_resolver(servers, timeout=timeout)

    async def addresses(self, host: str, port: int) -> list[IpAddress]:
        """Every address ``host`` resolves to, in order. Raises ``Refused``."""
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        if self.dns is None:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
            except (OSError, UnicodeError) as error:
                raise Refused(f"could not resolve {host}: {error}") from None
            found = [ipaddress.ip_address(info[4][0]) for info in infos]
        else:
            answers = await asyncio.gather(*(self._query(host, rdtype) for rdtype in ("A", "AAAA")))
            found = [address for answer in answers for address in answer]
        return list(dict.fromkeys(found))

    async def _query(self, host: str, rdtype: str) -> list[IpAddress]:
        assert self.dns is not None
        try:
            answer = await self.dns.resolve(host, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN:
            raise Refused(f"could not resolve {host}: no such name") from None
        except dns.exception.DNSException as error:
            raise Refused(f"could not resolve {host}: {error}") from None
        return [ipaddress.ip_address(record.to_text()) for record in answer.rrset or ()]


async def resolve(host: str, port: int, allow_private: bool, resolver: Resolver) -> IpAddress:
    """The address to connect to for ``host``: every address it resolves to must be allowed
    (one refused address refuses the host: a name serving both is not trusted). Raises
    ``Refused``, whose text never names a refused address."""
    addresses = await resolver.addresses(host, port)
    if not addresses:
        raise Refused(f"{host} has no address")
    if any(address_refusal(address, allow_private) for address in addresses):
        raise Refused(f"{host} resolves to {REFUSED_ADDRESS}")
    return addresses[0]


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
