"""The transport security a recipient domain asks for, and whether an MX session meets it
(docs/delivery.md, "Transport security"): DANE (RFC 7672, :mod:`layang.destinations.dane`) when
``LAYANG_DANE`` trusts a validating resolver, else MTA-STS (RFC 8461,
:mod:`layang.destinations.mta_sts`), else opportunistic STARTTLS; a shaping rule's
``tls = "required"`` or a message's REQUIRETLS (RFC 8689) may ask for more.

The delivery engine asks :func:`policy_for` once per domain and session, keeps only the MX hosts
the policy :meth:`~TransportPolicy.allows`, does the STARTTLS handshake with
:func:`~layang.destinations.certificates.ssl_context` and hands the result to
:func:`check_session` *before MAIL*: its :class:`TlsCheck` says whether the session may carry
mail, the event's ``tls`` detail, and the reply to record when it may not. Certificates are
checked after the handshake (:mod:`layang.destinations.certificates`), against the session's
chain (the system CAs and ``LAYANG_TLS_CAFILE``, or the TLSA records), so one handshake serves
every policy and a ``testing`` policy can deliver and still report what failed.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import dns.asyncresolver

from layang.config import Config
from layang.destinations.certificates import host_name, webpki_failure
from layang.destinations.dane import Tlsa, dane_failure, tlsa_records
from layang.destinations.mta_sts import (
    ENFORCE,
    NONE,
    POLICY_FETCH_SECONDS,
    TESTING,
    Fetching,
    StsPolicy,
    sts_policy,
)
from layang.destinations.result_types import (
    CERTIFICATE_EXPIRED,
    CERTIFICATE_HOST_MISMATCH,
    CERTIFICATE_NOT_TRUSTED,
    DNSSEC_INVALID,
    NO_TLS,
    STARTTLS_NOT_SUPPORTED,
    TLSA_INVALID,
    VALIDATION_FAILURE,
)
from layang.mail.message import REQUIRETLS, TLS_OPTIONAL

OPPORTUNISTIC = "opportunistic"
MTA_STS = "mta-sts"
DANE = "dane"
REQUIRED = "required"


@dataclass(frozen=True)
class TlsSettings:
    """What the policy look-ups need of the configuration; ``policy_port`` exists for tests
    (policies are fetched on 443); ``allow_private`` lets policy hosts be on private networks
    (``LAYANG_MX_ALLOW_PRIVATE``)."""

    dane: bool = False
    mx_port: int = 25
    cafile: str = ""
    policy_port: int = 443
    fetch_seconds: float = POLICY_FETCH_SECONDS
    allow_private: bool = False

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> TlsSettings:
        """The settings ``config`` gives (``LAYANG_DANE``, ``LAYANG_TLS_CAFILE``,
        ``LAYANG_MX_PORT``, ``LAYANG_MX_ALLOW_PRIVATE``)."""
        values: dict[str, Any] = {
            "dane": config.dane and bool(config.dns_resolver),
            "cafile": config.tls_cafile,
            "mx_port": config.mx_port,
            "allow_private": config.mx_allow_private,
        }
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class TransportPolicy:
    """What a recipient domain asks of the sessions that carry its mail.

    ``kind`` is the strongest policy found: ``dane``, ``mta-sts`` or ``opportunistic`` (or
    ``required``, see :meth:`requiring_tls`); ``mode`` is ``enforce`` or ``testing`` (``none``
    for opportunistic). ``mx_hosts`` are the MX hosts that may be tried, in the order given,
    ``skipped`` those an enforced MTA-STS policy rules out. ``tlsa`` holds the usable TLSA
    records of each MX host with a secure TLSA answer (an empty tuple: records exist but none is
    usable, so TLS is required without authentication). ``host_failures`` names the hosts that
    cannot be used now and why (a TLSA look-up that failed for a signed zone: RFC 7672 section
    2.2), which are left out of ``mx_hosts``. ``fetch_failure``
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
        return host_name(host) in {host_name(h) for h in self.mx_hosts}

    def no_host_reason(self) -> str:
        """Why none of the domain's MX hosts may be tried, as a ``Delay``'s reply text says it
        (``451 4.7.5`` goes before it)."""
        why = [f"{host}: {reason}" for host, reason in sorted(self.host_failures.items())]
        if self.skipped:
            why.append(f"{', '.join(self.skipped)}: not in its MTA-STS policy")
        listed = "; ".join(why) or "none is left to try"
        return f"no MX host of {self.domain} may be used: {listed}"

    def host_kind(self, host: str) -> str:
        """The policy that governs a session with ``host``: DANE outranks MTA-STS."""
        if host_name(host) in self.tlsa:
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
            hosts = [host_name(host)] if host else sorted(self.tlsa)
            return sorted(str(r) for h in hosts for r in self.tlsa.get(h, ()))
        return self.sts.strings if self.sts is not None else []


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
    domain = host_name(domain)
    hosts = tuple(mx_hosts)
    policy = TransportPolicy(domain, mx_hosts=hosts)
    fetching = Fetching(
        settings.cafile, settings.policy_port, settings.fetch_seconds, settings.allow_private
    )
    sts, fetch_failure = await sts_policy(domain, resolver, fetching)
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
        tlsa, failures = await tlsa_records(domain, hosts, resolver, settings.mx_port)
        if tlsa or failures:
            # DANE outranks MTA-STS: every host is tried, each under its own records, except
            # those whose TLSA look-up failed: whether they demand TLS cannot be known, so
            # they are not used at all (RFC 7672 section 2.2), never in plaintext. A policy
            # with such hosts is DANE even without records, so its sessions are its own.
            policy = replace(
                policy,
                kind=DANE,
                mode=ENFORCE,
                mx_hosts=tuple(h for h in hosts if host_name(h) not in failures),
                skipped=(),
                tlsa=tlsa,
                host_failures=failures,
            )
    return policy


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
    host = host_name(mx_host)
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
    if not policy.allows(host) and host in {host_name(h) for h in policy.skipped}:
        return refuse(None, VALIDATION_FAILURE, f"MX host {host} does not match the MTA-STS policy")
    if host in policy.host_failures and requirement != TLS_OPTIONAL:
        # Whatever else governs the session, a host of unknown DANE state carries no mail.
        reason = policy.host_failures[host]
        reply = f"451 4.7.5 {reason} (DANE of {policy.domain})"
        return TlsCheck(False, None, reply, False, DNSSEC_INVALID, reason)
    if ssl_object is None:
        if not advertised_starttls:
            reason = f"{host} does not offer STARTTLS"
            failure_type = STARTTLS_NOT_SUPPORTED
        else:
            reason = f"TLS with {host} failed: {_error_text(error)}"
            failure_type = _failure_type(error)
        if kind == OPPORTUNISTIC and policy.fetch_failure is None:
            # The mail may go, in plaintext; TLS-RPT counts only TLS sessions as successful
            # (RFC 8460 section 4.3), and the Security page shows it as "no TLS".
            return TlsCheck(True, plain, failure_type=failure_type, failure=f"{NO_TLS}: {reason}")
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
        failure = dane_failure(policy.tlsa.get(host, ()), ssl_object, host)
        failure_type = TLSA_INVALID
    else:
        failure_type, failure = webpki_failure(ssl_object, host, cafile)
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
