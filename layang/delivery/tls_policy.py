"""The transport security a recipient domain asks for, and whether an MX session meets it
(contract section 14): DANE (RFC 7672) when ``LAYANG_DANE`` trusts a validating resolver,
else MTA-STS (RFC 8461), else opportunistic STARTTLS.

The delivery engine asks :func:`policy_for` once per domain and session, keeps only the MX hosts
the policy :meth:`~TransportPolicy.allows`, does the STARTTLS handshake with
:func:`ssl_context` and hands the result to :func:`check_session` *before MAIL*: its
:class:`TlsCheck` says whether the session may carry mail, the event's ``tls`` detail, and the
reply to record when it may not. Certificates are checked here, after the handshake, against
the session's chain (the system CAs and ``LAYANG_TLS_CAFILE``, or the TLSA records), so one
handshake serves every policy and a ``testing`` policy can deliver and still report what failed.

MTA-STS policies are fetched with our own code rather than postfix-mta-sts-resolver's
``STSResolver``: it resolves with aiodns (the system's resolvers, not ``LAYANG_DNS_RESOLVER``) and
fetches with aiohttp's default TLS context (no ``LAYANG_TLS_CAFILE``), and has no way to change
either; the fetch and the parsing are small.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ipaddress
import json
import logging
import re
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import dns.asyncresolver
import dns.exception
import dns.flags
import dns.nameserver
import dns.rdatatype
import dns.resolver
import httpx
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from layang.clock import now_ms
from layang.config import Config
from layang.db import database, write_transaction
from layang.delivery.mx import MAX_QUERIES, TRY_SECONDS
from layang.mail.message import REQUIRETLS, TLS_OPTIONAL
from layang.tls_trust import client_ssl_context, trusted_roots

log = logging.getLogger("layang.tls")

NONE = "none"
OPPORTUNISTIC = "opportunistic"
MTA_STS = "mta-sts"
DANE = "dane"
REQUIRED = "required"

ENFORCE = "enforce"
TESTING = "testing"


POLICY_MAX_BYTES = 64 * 1024
POLICY_FETCH_SECONDS = 10.0
MAX_AGE_LIMIT = 31_557_600  # RFC 8461 section 3.2: one year

# RFC 8460 section 4.3 result types, used for the TLS-RPT counts.
STARTTLS_NOT_SUPPORTED = "starttls-not-supported"
CERTIFICATE_HOST_MISMATCH = "certificate-host-mismatch"
CERTIFICATE_EXPIRED = "certificate-expired"
CERTIFICATE_NOT_TRUSTED = "certificate-not-trusted"
VALIDATION_FAILURE = "validation-failure"
TLSA_INVALID = "tlsa-invalid"
DNSSEC_INVALID = "dnssec-invalid"
STS_POLICY_FETCH_ERROR = "sts-policy-fetch-error"
STS_POLICY_INVALID = "sts-policy-invalid"
STS_WEBPKI_INVALID = "sts-webpki-invalid"


@dataclass(frozen=True)
class TlsSettings:
    """What the policy look-ups need of the configuration; ``policy_port`` exists for tests
    (policies are fetched on 443)."""

    dane: bool = False
    mx_port: int = 25
    cafile: str = ""
    policy_port: int = 443
    fetch_seconds: float = POLICY_FETCH_SECONDS

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> TlsSettings:
        """The settings ``config`` gives (``LAYANG_DANE``, ``LAYANG_TLS_CAFILE``, and
        ``LAYANG_MX_PORT`` where the configuration has it)."""
        values: dict[str, Any] = {
            "dane": config.dane and bool(config.dns_resolver),
            "cafile": config.tls_cafile,
            "mx_port": getattr(config, "mx_port", 25),
        }
        values.update(overrides)
        return cls(**values)


class _PacedResolver(dns.asyncresolver.Resolver):
    """dnspython's asynchronous resolver with at most ``MAX_QUERIES`` look-ups in flight in
    one event loop: the first batch of a campaign asks about hundreds of new domains at once,
    and a resolver flooded that way drops some (each then waiting out a whole timeout)."""

    _limit: asyncio.Semaphore | None = None
    _limit_loop: asyncio.AbstractEventLoop | None = None

    async def resolve(self, *args: Any, **kwargs: Any) -> dns.resolver.Answer:  # type: ignore[override]
        loop = asyncio.get_running_loop()
        if self._limit is None or self._limit_loop is not loop:
            self._limit, self._limit_loop = asyncio.Semaphore(MAX_QUERIES), loop
        async with self._limit:
            return await super().resolve(*args, **kwargs)


def dns_resolver(config: Config, timeout: float = 5.0) -> dns.asyncresolver.Resolver:
    """An asynchronous resolver at ``LAYANG_DNS_RESOLVER`` (or the system's), asking for
    DNSSEC data so that a validating resolver's AD bit comes back. A query unanswered after
    ``TRY_SECONDS`` is sent again (UDP may be lost), within ``timeout`` in all."""
    servers = config.dns_resolvers
    resolver = _PacedResolver(configure=not servers)
    if servers:
        resolver.nameservers = [dns.nameserver.Do53Nameserver(h, p) for h, p in servers]
    resolver.lifetime = timeout
    resolver.timeout = min(TRY_SECONDS, timeout)
    resolver.use_edns(0, dns.flags.DO, 1232)
    return resolver


# --- Policies --------------------------------------------------------------------------


@dataclass(frozen=True)
class Tlsa:
    """One TLSA record (RFC 6698): certificate usage, selector, matching type, data."""

    usage: int
    selector: int
    matching_type: int
    data: bytes

    def matches(self, certificate: x509.Certificate) -> bool:
        """Whether ``certificate`` is what this record names."""
        if self.selector == 0:
            subject = certificate.public_bytes(serialization.Encoding.DER)
        elif self.selector == 1:
            subject = certificate.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        else:
            return False
        if self.matching_type == 0:
            return subject == self.data
        if self.matching_type == 1:
            return hashlib.sha256(subject).digest() == self.data
        if self.matching_type == 2:
            return hashlib.sha512(subject).digest() == self.data
        return False

    def __str__(self) -> str:
        return f"{self.usage} {self.selector} {self.matching_type} {self.data.hex()}"


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
    pattern, host = pattern.lower().rstrip("."), host.lower().rstrip(".")
    if pattern.startswith("*."):
        label, _, rest = host.partition(".")
        return bool(label) and rest == pattern[2:]
    return pattern == host


@dataclass(frozen=True)
class TransportPolicy:
    """What a recipient domain asks of the sessions that carry its mail.

    ``kind`` is the strongest policy found: ``dane``, ``mta-sts`` or ``opportunistic`` (or
    ``required``, see :meth:`requiring_tls`); ``mode`` is ``enforce`` or ``testing`` (``none``
    for opportunistic). ``mx_hosts`` are the MX hosts that may be tried, in the order given,
    ``skipped`` those an enforced MTA-STS policy rules out. ``tlsa`` holds the usable TLSA
    records of each MX host with a secure TLSA answer (an empty tuple: records exist but none is
    usable, so TLS is required without authentication). ``host_failures`` names the hosts that
    cannot be used now and why (a TLSA look-up that failed for a signed zone). ``fetch_failure``
    says why a published MTA-STS policy could not be fetched (then ``kind`` falls back).
    """

    domain: str
    kind: str = OPPORTUNISTIC
    mode: str = NONE
    mx_hosts: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()
    sts: StsPolicy | None = None
    tlsa: Mapping[str, tuple[Tlsa, ...]] = field(default_factory=dict)
    host_failures: Mapping[str, str] = field(default_factory=dict)
    fetch_failure: tuple[str, str] | None = None  # (result type, reason)
    required: bool = False

    @property
    def requires_verified_tls(self) -> bool:
        """Whether a session must be TLS with a verified certificate (DANE, MTA-STS enforce,
        a shaping rule's ``tls = "required"``)."""
        return self.kind == DANE or self.required or (self.kind == MTA_STS and self.mode == ENFORCE)

    def allows(self, host: str) -> bool:
        """Whether MX ``host`` may be tried at all."""
        return _name(host) in {_name(h) for h in self.mx_hosts}

    def host_kind(self, host: str) -> str:
        """The policy that governs a session with ``host``: DANE outranks MTA-STS."""
        if _name(host) in self.tlsa:
            return DANE
        if self.sts is not None and self.sts.mode in (ENFORCE, TESTING):
            return MTA_STS
        return REQUIRED if self.required else OPPORTUNISTIC

    def host_enforced(self, host: str) -> bool:
        """Whether a failed check with ``host`` keeps the mail from going (else it is only
        recorded)."""
        kind = self.host_kind(host)
        if kind in (DANE, REQUIRED):
            return True
        return kind == MTA_STS and (self.sts.mode == ENFORCE or self.required)  # type: ignore[union-attr]

    def requiring_tls(self) -> TransportPolicy:
        """This policy under a shaping rule's ``tls = "required"``: verified TLS (by DANE,
        MTA-STS or the MX name's certificate) or no delivery."""
        return replace(
            self, required=True, kind=self.kind if self.kind != OPPORTUNISTIC else REQUIRED
        )

    @property
    def report_type(self) -> str:
        """TLS-RPT's ``policy-type``: ``tlsa``, ``sts`` or ``no-policy-found``."""
        if self.kind == DANE:
            return "tlsa"
        if self.sts is not None or self.fetch_failure is not None:
            return "sts"
        return "no-policy-found"

    def report_strings(self, host: str | None = None) -> list[str]:
        """TLS-RPT's ``policy-string``: the TLSA records of ``host`` (DANE) or the policy's
        lines (MTA-STS)."""
        if self.kind == DANE:
            hosts = [_name(host)] if host else sorted(self.tlsa)
            return sorted(str(r) for h in hosts for r in self.tlsa.get(h, ()))
        return self.sts.strings if self.sts is not None else []


def _name(host: str) -> str:
    return host.lower().rstrip(".")


async def policy_for(
    domain: str,
    mx_hosts: Sequence[str],
    resolver: dns.asyncresolver.Resolver,
    *,
    settings: TlsSettings | None = None,
) -> TransportPolicy:
    """The transport policy of ``domain``, whose MX hosts (by preference) are ``mx_hosts``.

    DANE when ``settings.dane`` is on and the MX and TLSA answers of ``resolver`` carry the AD
    bit; else the domain's MTA-STS policy (from the shared cache, fetched again when missing,
    expired or when the TXT record's id changed); else opportunistic. Never raises for DNS or
    HTTP problems: a policy that cannot be found is no policy, a cached one is used while it
    lasts (RFC 8461 section 5.1).
    """
    settings = settings or TlsSettings()
    domain = _name(domain)
    hosts = tuple(mx_hosts)
    policy = TransportPolicy(domain, mx_hosts=hosts)
    sts, fetch_failure = await _sts_policy(domain, resolver, settings)
    if sts is not None and sts.mode in (ENFORCE, TESTING):
        policy = replace(policy, kind=MTA_STS, mode=sts.mode, sts=sts)
        if sts.mode == ENFORCE:
            allowed = tuple(h for h in hosts if sts.matches(h))
            policy = replace(
                policy, mx_hosts=allowed, skipped=tuple(h for h in hosts if h not in allowed)
            )
    elif fetch_failure is not None:
        policy = replace(policy, fetch_failure=fetch_failure)
    if settings.dane:
        tlsa, failures = await _dane(domain, hosts, resolver, settings)
        if tlsa or failures:
            # DANE outranks MTA-STS: every host is tried, each under its own records.
            policy = replace(
                policy,
                kind=DANE if tlsa else policy.kind,
                mode=ENFORCE if tlsa else policy.mode,
                mx_hosts=hosts,
                skipped=(),
                tlsa=tlsa,
                host_failures=failures,
            )
    return policy


# --- DANE ------------------------------------------------------------------------------


async def _secure_answer(
    resolver: dns.asyncresolver.Resolver, name: str, rdtype: str
) -> tuple[list[Any], bool, str | None]:
    """(records, whether the answer is authenticated, failure) for one look-up; a secure
    NXDOMAIN or no-answer is ``([], True, None)``."""
    try:
        answer = await resolver.resolve(name, rdtype, raise_on_no_answer=False, search=False)
    except dns.resolver.NXDOMAIN as error:
        responses = list(error.responses().values())
        secure = bool(responses) and all(r.flags & dns.flags.AD for r in responses)
        return [], secure, None
    except (dns.exception.DNSException, OSError) as error:
        return [], False, f"{rdtype} look-up of {name} failed: {error}"
    secure = bool(answer.response.flags & dns.flags.AD)
    return (list(answer.rrset) if answer.rrset is not None else []), secure, None


async def _dane(
    domain: str,
    hosts: Sequence[str],
    resolver: dns.asyncresolver.Resolver,
    settings: TlsSettings,
) -> tuple[dict[str, tuple[Tlsa, ...]], dict[str, str]]:
    """The usable TLSA records per MX host with a secure answer, and the hosts whose TLSA
    look-up failed in a signed zone (RFC 7672 section 2.2: such a host must not be used)."""
    _, mx_secure, _ = await _secure_answer(resolver, domain, "MX")
    if not mx_secure:
        return {}, {}  # an insecure MX RRset: DANE does not apply (RFC 7672 section 2.2.1)
    found: dict[str, tuple[Tlsa, ...]] = {}
    failures: dict[str, str] = {}
    for host in hosts:
        name = f"_{settings.mx_port}._tcp.{_name(host)}"
        records, secure, failure = await _secure_answer(resolver, name, "TLSA")
        if failure is not None:
            failures[_name(host)] = failure
        elif secure and records:
            found[_name(host)] = tuple(
                Tlsa(r.usage, r.selector, r.mtype, bytes(r.cert))
                for r in records
                if r.usage in (2, 3)
            )
    return found, failures


# --- MTA-STS ---------------------------------------------------------------------------

_STS_RECORD = re.compile(r"^v=STSv1\s*(;|$)")
_STS_ID = re.compile(r"^[A-Za-z0-9]{1,32}$")


class PolicyFetchError(Exception):
    """An MTA-STS policy could not be fetched or read; ``result_type`` is TLS-RPT's."""

    def __init__(self, result_type: str, reason: str) -> None:
        super().__init__(reason)
        self.result_type = result_type
        self.reason = reason


async def _sts_policy(
    domain: str, resolver: dns.asyncresolver.Resolver, settings: TlsSettings
) -> tuple[StsPolicy | None, tuple[str, str] | None]:
    """The domain's MTA-STS policy in force (or None) and, when a published one could not be
    fetched, (TLS-RPT result type, reason)."""
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
        policy = await _fetch_policy(domain, record_id, resolver, settings)
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
    domain: str, record_id: str, resolver: dns.asyncresolver.Resolver, settings: TlsSettings
) -> StsPolicy:
    """Fetch and parse ``https://mta-sts.<domain>/.well-known/mta-sts.txt``: the host looked up
    through ``resolver``, the certificate verified for that name (system CAs and
    ``LAYANG_TLS_CAFILE``), no redirects, at most ``POLICY_MAX_BYTES`` and
    ``settings.fetch_seconds``. Raises :class:`PolicyFetchError`."""
    host = f"mta-sts.{domain}"
    try:
        async with asyncio.timeout(settings.fetch_seconds):
            address = await _address_of(host, resolver)
            text = await _get_policy_text(host, address, settings)
    except TimeoutError:
        raise PolicyFetchError(
            STS_POLICY_FETCH_ERROR, f"fetching the policy from {host} timed out"
        ) from None
    return parse_policy(text, record_id)


async def _address_of(host: str, resolver: dns.asyncresolver.Resolver) -> str:
    for rdtype in ("A", "AAAA"):
        try:
            answer = await resolver.resolve(host, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN:
            break
        except (dns.exception.DNSException, OSError) as error:
            raise PolicyFetchError(
                STS_POLICY_FETCH_ERROR, f"cannot resolve {host}: {error}"
            ) from None
        if answer.rrset:
            return answer.rrset[0].address
    raise PolicyFetchError(STS_POLICY_FETCH_ERROR, f"{host} has no address")


async def _get_policy_text(host: str, address: str, settings: TlsSettings) -> str:
    literal = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    url = f"https://{literal}:{settings.policy_port}/.well-known/mta-sts.txt"
    context = client_ssl_context(settings.cafile or None)
    try:
        async with (
            httpx.AsyncClient(
                verify=context,
                timeout=settings.fetch_seconds,
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


# --- Sessions --------------------------------------------------------------------------


def ssl_context(verify: bool, cafile: str | None = None) -> ssl.SSLContext:
    """The client context for STARTTLS with an MX host (system CAs and ``cafile``, i.e.
    ``LAYANG_TLS_CAFILE``). :func:`check_session` checks the certificate itself, so MX sessions
    use ``verify=False``; ``verify=True`` makes the handshake itself refuse a certificate not
    valid for the ``server_hostname`` given."""
    return client_ssl_context(cafile, verify=verify)


@dataclass(frozen=True)
class TlsCheck:
    """Whether a session may carry the mail (``ok``), what the event records (``tls``), and
    when it may not, the reply to record: ``bounce`` says whether it is final (REQUIRETLS,
    ``550 5.7.30``) or a ``Delay``. ``failure_type`` and ``failure`` are for TLS-RPT (None when
    the session met its policy)."""

    ok: bool
    tls: dict[str, Any] | None
    reply: str | None = None
    bounce: bool = False
    failure_type: str | None = None
    failure: str | None = None

    @property
    def succeeded(self) -> bool:
        """Whether TLS-RPT counts the session as successful."""
        return self.failure_type is None


def check_session(
    policy: TransportPolicy,
    mx_host: str,
    ssl_object: ssl.SSLObject | ssl.SSLSocket | None,
    advertised_starttls: bool,
    *,
    error: BaseException | None = None,
    requirement: str | None = None,
    requiretls_advertised: bool = False,
    cafile: str | None = None,
) -> TlsCheck:
    """Whether a session with ``mx_host`` meets ``policy``, checked after STARTTLS and before
    MAIL.

    ``ssl_object`` is the session's TLS object (None when the session is plaintext: STARTTLS
    not offered, or the handshake failed with ``error``). ``requirement`` is the message's
    (:data:`REQUIRETLS` or :data:`TLS_OPTIONAL`); ``requiretls_advertised`` whether the EHLO
    after STARTTLS offered REQUIRETLS. Never raises.
    """
    host = _name(mx_host)
    kind = policy.host_kind(host)
    enforced = policy.host_enforced(host)
    if requirement == REQUIRETLS:
        enforced = True
        if kind == OPPORTUNISTIC:
            kind = REQUIRED
    elif requirement == TLS_OPTIONAL:
        enforced = False

    def refuse(tls: dict[str, Any] | None, failure_type: str, reason: str) -> TlsCheck:
        if not enforced:
            if tls is not None:
                tls = {**tls, "failure": reason}
            return TlsCheck(True, tls, failure_type=failure_type, failure=reason)
        if requirement == REQUIRETLS:
            reply = f"550 5.7.30 REQUIRETLS not possible: {reason}"
            return TlsCheck(False, tls, reply, True, failure_type, reason)
        reply = f"451 4.7.5 {reason} ({_describe(kind, policy)})"
        return TlsCheck(False, tls, reply, False, failure_type, reason)

    plain = {"version": None, "cipher": None, "verified": False, "policy": NONE}
    if not policy.allows(host) and host in {_name(h) for h in policy.skipped}:
        return refuse(None, VALIDATION_FAILURE, f"MX host {host} does not match the MTA-STS policy")
    if host in policy.host_failures:
        return refuse(None, DNSSEC_INVALID, policy.host_failures[host])
    if ssl_object is None:
        if not advertised_starttls:
            reason = f"{host} does not offer STARTTLS"
            failure_type = STARTTLS_NOT_SUPPORTED
        else:
            reason = f"TLS with {host} failed: {_error_text(error)}"
            failure_type = _failure_type(error)
        if kind == OPPORTUNISTIC and policy.fetch_failure is None:
            return TlsCheck(True, plain)
        if not enforced:
            return refuse({**plain, "policy": kind}, failure_type, reason)
        return refuse(plain, failure_type, reason)

    cipher = ssl_object.cipher()
    tls: dict[str, Any] = {
        "version": ssl_object.version(),
        "cipher": cipher[0] if cipher else None,
        "verified": False,
        "policy": kind,
    }
    if kind == DANE:
        failure = _dane_failure(policy.tlsa.get(host, ()), ssl_object, host)
        failure_type = TLSA_INVALID
    else:
        failure_type, failure = _webpki_failure(ssl_object, host, cafile)
    tls["verified"] = failure is None and not (kind == DANE and not policy.tlsa.get(host))
    if failure is None and kind == MTA_STS and not policy.sts.matches(host):  # type: ignore[union-attr]
        failure_type = VALIDATION_FAILURE
        failure = f"MX host {host} does not match the MTA-STS policy"
    if failure is not None and (kind in (DANE, MTA_STS, REQUIRED) or requirement == REQUIRETLS):
        return refuse(tls, failure_type or VALIDATION_FAILURE, failure)
    if requirement == REQUIRETLS and not requiretls_advertised:
        return refuse(tls, VALIDATION_FAILURE, f"{host} does not advertise REQUIRETLS")
    if policy.fetch_failure is not None and kind == OPPORTUNISTIC:
        result_type, reason = policy.fetch_failure
        return TlsCheck(True, {**tls, "failure": reason}, failure_type=result_type, failure=reason)
    return TlsCheck(True, tls)


def _describe(kind: str, policy: TransportPolicy) -> str:
    if kind == DANE:
        return f"DANE of {policy.domain}"
    if kind == MTA_STS:
        return f"MTA-STS policy of {policy.domain}, mode {policy.mode}"
    return "TLS is required"


def _error_text(error: BaseException | None) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        return str(error.verify_message)
    return str(error) if error is not None else "handshake failed"


def _failure_type(error: BaseException | None) -> str:
    if isinstance(error, ssl.SSLCertVerificationError):
        return {62: CERTIFICATE_HOST_MISMATCH, 10: CERTIFICATE_EXPIRED}.get(
            error.verify_code, CERTIFICATE_NOT_TRUSTED
        )
    return VALIDATION_FAILURE


def peer_chain(ssl_object: ssl.SSLObject | ssl.SSLSocket) -> list[x509.Certificate]:
    """The certificates the server sent, its own first, whether or not they were verified."""
    inner = getattr(ssl_object, "_sslobj", None)
    chain: list[x509.Certificate] = []
    raw = getattr(inner, "get_unverified_chain", None)
    if raw is not None:
        for certificate in raw() or ():
            chain.append(x509.load_der_x509_certificate(certificate.public_bytes(2)))  # DER
    if not chain:
        der = ssl_object.getpeercert(binary_form=True)
        if der:
            chain.append(x509.load_der_x509_certificate(der))
    return chain


def verification_failure(
    ssl_object: ssl.SSLObject | ssl.SSLSocket, host: str, cafile: str | None = None
) -> str | None:
    """Why the session's certificate is not valid for ``host`` under the trusted CAs (system
    and ``cafile``), or None when it is."""
    return _webpki_failure(ssl_object, host, cafile)[1]


def _webpki_failure(
    ssl_object: ssl.SSLObject | ssl.SSLSocket, host: str, cafile: str | None
) -> tuple[str | None, str | None]:
    """(TLS-RPT result type, reason) when the certificate is not valid for ``host``."""
    context = ssl_object.context
    checked = context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    if checked and _name(ssl_object.server_hostname or "") == host:
        return None, None  # the handshake itself checked it
    chain = peer_chain(ssl_object)
    if not chain:
        return CERTIFICATE_NOT_TRUSTED, f"{host} presented no certificate"
    leaf = chain[0]
    if not _names_match(leaf, host):
        return CERTIFICATE_HOST_MISMATCH, f"the certificate of {host} is not valid for that name"
    now = datetime.now(UTC)
    if leaf.not_valid_after_utc < now or leaf.not_valid_before_utc > now:
        return CERTIFICATE_EXPIRED, f"the certificate of {host} has expired or is not yet valid"
    try:
        verifier = (
            PolicyBuilder().store(_store(cafile or None)).build_server_verifier(_subject(host))
        )
        verifier.verify(leaf, chain[1:])
    except (VerificationError, ValueError) as error:
        return CERTIFICATE_NOT_TRUSTED, f"the certificate of {host} is not trusted: {error}"
    return None, None


@functools.lru_cache(maxsize=8)
def _store(cafile: str | None) -> Store:
    # Building the store of ~140 system roots costs 1.5 ms; a verification with it, 0.3 ms.
    return Store(list(trusted_roots(cafile)))


def _subject(host: str) -> x509.DNSName | x509.IPAddress:
    """What a certificate must name for ``host``: a smarthost may be given by address."""
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _names_match(certificate: x509.Certificate, host: str) -> bool:
    try:
        alternatives = certificate.extensions.get_extension_for_class(
            x509.SubjectAlternativeName
        ).value
    except x509.ExtensionNotFound:
        return False
    subject = _subject(host)
    if isinstance(subject, x509.IPAddress):
        return subject.value in alternatives.get_values_for_type(x509.IPAddress)
    names = alternatives.get_values_for_type(x509.DNSName)
    return any(
        mx_matches(name, host) if name.startswith("*.") else _name(name) == host for name in names
    )


def _dane_failure(
    records: Sequence[Tlsa], ssl_object: ssl.SSLObject | ssl.SSLSocket, host: str
) -> str | None:
    """Why the session's certificate matches none of ``records`` (RFC 7672 section 3), or
    None. No usable record: encryption is all that is required."""
    if not records:
        return None
    chain = peer_chain(ssl_object)
    if not chain:
        return f"{host} presented no certificate"
    leaf = chain[0]
    if any(r.usage == 3 and r.matches(leaf) for r in records):
        return None  # DANE-EE: the key is the identity; names and dates do not matter
    for record in (r for r in records if r.usage == 2):
        for index, anchor in enumerate(chain[1:], start=1):
            if not record.matches(anchor):
                continue
            if not _names_match(leaf, host):
                return f"the certificate of {host} is not valid for that name (DANE-TA)"
            try:
                PolicyBuilder().store(Store([anchor])).build_server_verifier(_subject(host)).verify(
                    leaf, chain[1:index]
                )
            except (VerificationError, ValueError) as error:
                return f"the chain of {host} does not lead to its DANE-TA anchor: {error}"
            return None
    return f"the certificate of {host} matches none of its TLSA records"
