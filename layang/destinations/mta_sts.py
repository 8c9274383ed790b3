"""MTA-STS (RFC 8461): whether a recipient domain publishes a policy (the ``_mta-sts`` TXT
record and its ``id``), the policy fetched from ``https://mta-sts.<domain>/.well-known/mta-sts.txt``
and parsed, and the cache of policies every worker shares (``mta_sts_policy``, docs/schema.sql).

Policies are fetched with our own code rather than postfix-mta-sts-resolver's ``STSResolver``:
it resolves with aiodns (the system's resolvers, not ``LAYANG_DNS_RESOLVER``) and fetches with
aiohttp's default TLS context (no ``LAYANG_TLS_CAFILE``), and has no way to change either; the
fetch and the parsing are small.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import re
import ssl
from dataclasses import dataclass

import dns.asyncresolver
import dns.exception
import dns.resolver
import httpx

from layang.clock import now_ms
from layang.db import database, write_transaction
from layang.destinations.addresses import IpAddress, Refused, checked
from layang.destinations.certificates import wildcard_matches
from layang.destinations.result_types import (
    STS_POLICY_FETCH_ERROR,
    STS_POLICY_INVALID,
    STS_WEBPKI_INVALID,
)
from layang.tls_trust import client_ssl_context

log = logging.getLogger("layang.tls")

NONE = "none"
ENFORCE = "enforce"
TESTING = "testing"

POLICY_MAX_BYTES = 64 * 1024
POLICY_FETCH_SECONDS = 10.0
MAX_AGE_LIMIT = 31_557_600  # RFC 8461 section 3.2: one year


@dataclass(frozen=True)
class StsPolicy:
    """A fetched MTA-STS policy."""

    id: str
    mode: str
    mx: tuple[str, ...]
    max_age: int
    text: str

    def matches(self, host: str) -> bool:
        """Whether MX ``host`` matches one of the policy's ``mx`` patterns (a ``*.`` pattern
        stands for exactly one leftmost label)."""
        return any(mx_matches(pattern, host) for pattern in self.mx)

    @property
    def strings(self) -> list[str]:
        """The policy as TLS-RPT's ``policy-string`` lists it: one entry per line."""
        return [line.strip() for line in self.text.splitlines() if line.strip()]


def mx_matches(pattern: str, host: str) -> bool:
    """RFC 8461 section 4.1 matching of an MX host name against one ``mx`` pattern."""
    return wildcard_matches(pattern, host)


_STS_RECORD = re.compile(r"^v=STSv1\s*(;|$)")
_STS_ID = re.compile(r"^[A-Za-z0-9]{1,32}$")


class PolicyFetchError(Exception):
    """An MTA-STS policy could not be fetched or read; ``result_type`` is TLS-RPT's."""

    def __init__(self, result_type: str, reason: str) -> None:
        super().__init__(reason)
        self.result_type = result_type
        self.reason = reason


@dataclass(frozen=True)
class Fetching:
    """How policies are fetched: trusting the system CAs and ``cafile``
    (``LAYANG_TLS_CAFILE``), from ``port`` (443; another for tests), within ``seconds``, from
    public addresses only unless ``allow_private`` (``LAYANG_MX_ALLOW_PRIVATE``; see
    :mod:`layang.destinations.addresses`)."""

    cafile: str = ""
    port: int = 443
    seconds: float = POLICY_FETCH_SECONDS
    allow_private: bool = False


async def sts_policy(
    domain: str, resolver: dns.asyncresolver.Resolver, fetching: Fetching | None = None
) -> tuple[StsPolicy | None, tuple[str, str] | None]:
    """The MTA-STS policy of ``domain`` in force (or None) and, when a published one could not
    be fetched, (RFC 8460 result type, reason). The shared cache answers while its policy lasts
    and the TXT record's ``id`` is the same; else the policy is fetched again, and a cached one
    still holds when that fails (RFC 8461 section 5.1). Never raises for DNS or HTTP
    problems."""
    fetching = fetching or Fetching()
    record_id = await _sts_record_id(domain, resolver)
    cached = await asyncio.to_thread(cached_policy, domain)
    now = now_ms()
    live = cached if cached is not None and cached[1] > now else None
    if record_id is None:
        # No record (or DNS trouble): a cached policy still holds until it expires.
        return (live[0] if live else None), None
    if live is not None and live[0].id == record_id:
        return live[0], None
    try:
        policy = await _fetch_policy(domain, record_id, resolver, fetching)
    except PolicyFetchError as error:
        log.info("MTA-STS policy of %s not fetched: %s", domain, error.reason)
        return (live[0] if live else None), (error.result_type, error.reason)
    await asyncio.to_thread(store_policy, domain, policy)
    return policy, None


async def _sts_record_id(domain: str, resolver: dns.asyncresolver.Resolver) -> str | None:
    """The ``id`` of the ``_mta-sts`` TXT record; None without exactly one valid record, or
    when the look-up fails."""
    try:
        answer = await resolver.resolve(
            f"_mta-sts.{domain}", "TXT", raise_on_no_answer=False, search=False
        )
    except (dns.exception.DNSException, OSError):
        return None
    texts = [b"".join(r.strings).decode("ascii", "replace") for r in (answer.rrset or ())]
    records = [t for t in texts if _STS_RECORD.match(t)]
    if len(records) != 1:
        return None
    fields_ = dict(_pair(part) for part in records[0].split(";") if "=" in part)
    record_id = fields_.get("id", "")
    return record_id if _STS_ID.match(record_id) else None


def _pair(part: str) -> tuple[str, str]:
    key, _, value = part.strip().partition("=")
    return key.strip(), value.strip()


async def _fetch_policy(
    domain: str, record_id: str, resolver: dns.asyncresolver.Resolver, fetching: Fetching
) -> StsPolicy:
    """Fetch and parse ``https://mta-sts.<domain>/.well-known/mta-sts.txt``: the host looked up
    through ``resolver``, the certificate verified for that name (system CAs and
    ``LAYANG_TLS_CAFILE``), no redirects, at most ``POLICY_MAX_BYTES`` and
    ``fetching.seconds``. Raises :class:`PolicyFetchError`."""
    host = f"mta-sts.{domain}"
    try:
        async with asyncio.timeout(fetching.seconds):
            address = await _address_of(host, resolver, fetching.allow_private)
            text = await _get_policy_text(host, address, fetching)
    except TimeoutError:
        raise PolicyFetchError(
            STS_POLICY_FETCH_ERROR, f"fetching the policy from {host} timed out"
        ) from None
    return parse_policy(text, record_id)


async def _address_of(host: str, resolver: dns.asyncresolver.Resolver, allow_private: bool) -> str:
    """The address to fetch ``host``'s policy from: every address it has must be one Layang
    may connect to (a recipient domain names it; RFC 8461 leaves where it points to them)."""
    found: list[IpAddress] = []
    for rdtype in ("A", "AAAA"):
        try:
            answer = await resolver.resolve(host, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN:
            break
        except (dns.exception.DNSException, OSError) as error:
            raise PolicyFetchError(
                STS_POLICY_FETCH_ERROR, f"cannot resolve {host}: {error}"
            ) from None
        found.extend(ipaddress.ip_address(record.address) for record in answer.rrset or ())
    try:
        return str(checked(host, found, allow_private))
    except Refused as refused:
        raise PolicyFetchError(STS_POLICY_FETCH_ERROR, f"not fetched: {refused}") from None


async def _get_policy_text(host: str, address: str, fetching: Fetching) -> str:
    literal = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    url = f"https://{literal}:{fetching.port}/.well-known/mta-sts.txt"
    context = client_ssl_context(fetching.cafile or None)
    try:
        async with (
            httpx.AsyncClient(
                verify=context,
                timeout=fetching.seconds,
                follow_redirects=False,
                trust_env=False,
            ) as client,
            client.stream(
                "GET", url, headers={"Host": host}, extensions={"sni_hostname": host}
            ) as response,
        ):
            if response.status_code != 200:
                raise PolicyFetchError(
                    STS_POLICY_FETCH_ERROR,
                    f"https://{host}/.well-known/mta-sts.txt answered {response.status_code}",
                )
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if media_type != "text/plain":
                raise PolicyFetchError(
                    STS_POLICY_INVALID,
                    f"the policy at {host} is {media_type or 'untyped'}, not text/plain",
                )
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > POLICY_MAX_BYTES:
                    raise PolicyFetchError(
                        STS_POLICY_INVALID, f"the policy at {host} exceeds {POLICY_MAX_BYTES} bytes"
                    )
    except httpx.ConnectError as error:
        cause = error.__context__
        while cause is not None and not isinstance(cause, ssl.SSLError):
            cause = cause.__context__
        if isinstance(cause, ssl.SSLCertVerificationError):
            raise PolicyFetchError(
                STS_WEBPKI_INVALID,
                f"the certificate of {host} is not valid: {cause.verify_message}",
            ) from None
        raise PolicyFetchError(
            STS_POLICY_FETCH_ERROR, f"cannot fetch from {host}: {error}"
        ) from None
    except httpx.HTTPError as error:
        raise PolicyFetchError(
            STS_POLICY_FETCH_ERROR, f"cannot fetch from {host}: {error}"
        ) from None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyFetchError(STS_POLICY_INVALID, f"the policy at {host} is not UTF-8") from None


def parse_policy(text: str, record_id: str) -> StsPolicy:
    """An MTA-STS policy file (RFC 8461 section 3.2). Raises :class:`PolicyFetchError`
    (``sts-policy-invalid``) for one that is not valid."""
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise PolicyFetchError(STS_POLICY_INVALID, f"policy line {line.strip()!r} has no ':'")
        values.setdefault(key.strip().lower(), []).append(value.strip())

    def one(key: str) -> str:
        found = values.get(key, [])
        if not found:
            raise PolicyFetchError(STS_POLICY_INVALID, f"the policy has no {key}")
        return found[0]

    if one("version") != "STSv1":
        raise PolicyFetchError(STS_POLICY_INVALID, "the policy's version is not STSv1")
    mode = one("mode")
    if mode not in (ENFORCE, TESTING, NONE):
        raise PolicyFetchError(STS_POLICY_INVALID, f"unknown policy mode {mode!r}")
    max_age_text = one("max_age")
    if not max_age_text.isdigit() or int(max_age_text) > MAX_AGE_LIMIT:
        raise PolicyFetchError(STS_POLICY_INVALID, f"bad max_age {max_age_text!r}")
    mx = tuple(m.lower().rstrip(".") for m in values.get("mx", ()))
    if mode != NONE and not mx:
        raise PolicyFetchError(STS_POLICY_INVALID, "the policy names no mx")
    return StsPolicy(record_id, mode, mx, int(max_age_text), text)


# --- The shared cache ------------------------------------------------------------------

_SELECT_POLICY = (
    'SELECT "policy_id", "mode", "mx", "max_age", "text", "expires_at" '
    'FROM "mta_sts_policy" WHERE "domain" = ?'
)


def cached_policy(domain: str) -> tuple[StsPolicy, int] | None:
    """The cached policy of ``domain`` and when it expires (epoch ms), if one is cached."""
    database.connect(reuse_if_open=True)
    row = database.execute_sql(
        _SELECT_POLICY.replace("?", database.obj.param),
        (domain,),  # type: ignore[union-attr]
    ).fetchone()
    if row is None:
        return None
    policy_id, mode, mx, max_age, text, expires_at = row
    return StsPolicy(policy_id, mode, tuple(json.loads(mx)), max_age, text), expires_at


def store_policy(domain: str, policy: StsPolicy) -> None:
    """Cache ``policy`` for ``domain`` for its ``max_age``, for every worker."""
    database.connect(reuse_if_open=True)
    now = now_ms()
    param = database.obj.param  # type: ignore[union-attr]
    values = (
        domain,
        policy.id,
        policy.mode,
        json.dumps(list(policy.mx)),
        policy.max_age,
        policy.text,
        now,
        now + policy.max_age * 1000,
    )
    marks = ", ".join([param] * len(values))
    with write_transaction():
        database.execute_sql(
            'INSERT INTO "mta_sts_policy" ("domain", "policy_id", "mode", "mx", "max_age", '
            f'"text", "fetched_at", "expires_at") VALUES ({marks}) '
            'ON CONFLICT ("domain") DO UPDATE SET "policy_id" = excluded."policy_id", '
            '"mode" = excluded."mode", "mx" = excluded."mx", "max_age" = excluded."max_age", '
            '"text" = excluded."text", "fetched_at" = excluded."fetched_at", '
            '"expires_at" = excluded."expires_at"',
            values,
        )
