"""The smarthost: the upstream server ``LAYANG_RELAY_URL`` names, and what that URL means.

``smtp://[user:pass@]host[:port]``
    Port 25 by default. STARTTLS is used when the server offers it, without verifying the
    certificate (opportunistic, like Postfix's "may" level). ``?tls=required`` makes STARTTLS
    mandatory and verifies the certificate against the system CAs, or only against
    ``?cafile=/path.pem``; ``?verify=off`` keeps the encryption but skips verification.
    ``?tls=off`` never starts TLS. Credentials (percent-encoded in the URL) are only ever sent
    over TLS, unless ``tls=off`` says plaintext is intended. ``?sessions=N`` (default 50, as
    many as Postfix's anvil allows one client by default) is the most sessions open to it at
    once, across every worker process and host sharing the database: the smarthost is a site
    (named ``host:port``) whose limit is lowered, as an MX site's is, when it answers 421 to a
    new connection or does not greet within 30 s (docs/deploy.md, "Sizing").
``smtps://[user:pass@]host[:port]``
    Implicit TLS, port 465 by default, certificate verified (``cafile=`` and ``verify=off`` as
    above).
``capture:DIR``
    Development sink (:mod:`layang.delivery.capture`): one ``.eml`` file per recipient in
    ``DIR``, nothing leaves the machine.

See docs/configuration.md (``LAYANG_RELAY_URL``). A :class:`Smarthost` is the settings of its
sessions (:class:`~layang.delivery.smtp.SmtpSession`, which does the talking) and opens them.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from layang.delivery.capture import CaptureDirectory
from layang.delivery.smtp import SmtpSession
from layang.destinations.certificates import verification_failure
from layang.destinations.shaping import SiteRule
from layang.tls_trust import client_ssl_context

DEFAULT_SESSIONS = 50
"""Sessions open to a smarthost at once unless its URL says ``?sessions=N``."""
MAX_SESSIONS = 10_000


class RelayConfigError(ValueError):
    """The relay URL (or something it names, like its ``cafile``) is unusable."""


@dataclass(frozen=True)
class Smarthost:
    """One upstream server and how to talk to it: ``tls`` is ``may``, ``required`` or ``off``
    (``implicit_tls``: ``smtps://``); ``context`` is used for TLS; ``credentials`` (user,
    password) for AUTH; ``timeout`` (seconds) bounds every network wait; ``trusted_cafile``
    (``LAYANG_TLS_CAFILE``) is trusted besides the system's CAs when a REQUIRETLS message checks
    an opportunistic session's certificate."""

    host: str
    port: int
    tls: str = "may"
    implicit_tls: bool = False
    context: ssl.SSLContext | None = None
    credentials: tuple[str, str] | None = None
    helo_name: str = "localhost"
    timeout: float = 60.0
    trusted_cafile: str = ""
    pipelining: bool = True
    sessions: int = DEFAULT_SESSIONS

    def __repr__(self) -> str:
        scheme = "smtps" if self.implicit_tls else "smtp"
        return f"<Smarthost {scheme}://{self.where} tls={self.tls}>"

    @property
    def where(self) -> str:
        """``host:port`` as replies name it (``[host]:port`` for an IPv6 address)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def site(self) -> str:
        """The site the smarthost is (``host:port``, lower-cased): its session limit and state
        (throttled, suspended) are shared by every process, as an MX site's are."""
        return self.where.lower()

    @property
    def rule(self) -> SiteRule:
        """The smarthost's shaping: ``sessions`` at once, 100 messages per session."""
        return SiteRule(self.site, connections=self.sessions)

    @property
    def sources(self) -> tuple[None]:
        """One source: the system's choice of address (a site's limit is per source)."""
        return (None,)

    def session(self) -> SmtpSession:
        """A new session to the smarthost, not opened yet."""
        return SmtpSession(
            self.host,
            self.port,
            helo_name=self.helo_name,
            tls=self.tls,
            implicit_tls=self.implicit_tls,
            context=self.context,
            credentials=self.credentials,
            timeout=self.timeout,
            pipelining=self.pipelining,
        )

    async def open(self, job: Any = None) -> SmtpSession:
        """An opened session (connected, greeted, STARTTLS and AUTH as configured); raises
        :class:`~layang.delivery.transports.Refused` saying why not."""
        session = self.session()
        await session.open()
        return session

    def close(self) -> None:
        """Nothing to release: the engine owns the sessions."""

    def refusal(self, session: SmtpSession, job: Any) -> str | None:
        """Why ``session`` may not carry ``job``: a REQUIRETLS message (RFC 8689) over a
        session that is not TLS with a certificate valid for the smarthost's name, to a server
        advertising REQUIRETLS. The reply that bounces it (``550 5.7.30 …``), or None."""
        if not job.envelope.requiretls:
            return None
        refusal = _requiretls_refusal(session, self.trusted_cafile or None)
        return None if refusal is None else f"550 5.7.30 {refusal}"


def _requiretls_refusal(session: SmtpSession, trusted_cafile: str | None) -> str | None:
    ssl_object = session.ssl_object
    if ssl_object is None:
        return f"REQUIRETLS needs TLS but the session with {session.where} is not encrypted"
    context = session.context
    verified = context is not None and context.verify_mode == ssl.CERT_REQUIRED
    if not (verified and context is not None and context.check_hostname):
        failure = verification_failure(ssl_object, session.server_hostname, trusted_cafile)
        if failure is not None:
            return f"REQUIRETLS needs a verified certificate: {failure}"
    if not session.has("REQUIRETLS"):
        return f"REQUIRETLS is not supported by {session.where}"
    return None


def relay_from_url(
    url: str, *, helo_name: str = "localhost", timeout: float = 60.0, trusted_cafile: str = ""
) -> Smarthost | CaptureDirectory:
    """The smarthost or capture directory the URL describes (see the module documentation).

    ``helo_name`` is the name given in EHLO/HELO; ``timeout`` bounds every network wait;
    ``trusted_cafile`` (``LAYANG_TLS_CAFILE``) adds CAs to the system's when the URL names no
    ``cafile`` of its own.
    Raises :class:`RelayConfigError` for anything but a well-formed, usable URL, including a
    ``cafile`` that cannot be loaded.
    """
    scheme, _, rest = url.partition(":")
    scheme = scheme.lower()
    if scheme == "capture":
        if not rest:
            raise RelayConfigError("capture: needs a directory, e.g. capture:/var/lib/layang/out")
        return CaptureDirectory(Path(rest))
    if scheme not in ("smtp", "smtps") or not rest.startswith("//"):
        raise RelayConfigError(
            f"unsupported relay URL {redact_url(url)!r}: use smtp://, smtps:// or capture:DIR"
        )
    implicit_tls = scheme == "smtps"
    parts = urlsplit(url)
    try:
        port = parts.port or (465 if implicit_tls else 25)
        host = parts.hostname
    except ValueError as error:
        raise RelayConfigError(f"bad relay URL {redact_url(url)!r}: {error}") from None
    if not host:
        raise RelayConfigError(f"relay URL {redact_url(url)!r} names no host")
    if parts.path not in ("", "/") or parts.fragment:
        raise RelayConfigError(f"relay URL {redact_url(url)!r} has a path or fragment")

    options = _query_options(url, parts.query)
    tls = options.pop("tls", None)
    cafile = options.pop("cafile", None)
    verify_given = "verify" in options
    verify = options.pop("verify", "on")
    sessions = _sessions(options.pop("sessions", None))
    if options:
        raise RelayConfigError(
            f"unknown relay URL option(s) {sorted(options)}: known are tls, cafile, verify, "
            "sessions"
        )
    if verify not in ("on", "off"):
        raise RelayConfigError("relay URL option verify must be on or off")
    if implicit_tls:
        if tls is not None:
            raise RelayConfigError("smtps:// is always TLS; the tls option is for smtp://")
        tls = "required"
    elif tls is None:
        tls = "may"
    elif tls not in ("required", "off"):
        raise RelayConfigError("relay URL option tls must be required or off")
    if tls != "required" and (cafile is not None or verify_given):
        raise RelayConfigError("cafile and verify only apply with tls=required or smtps://")

    if tls == "required":
        context = _verifying_context(cafile, verify == "on", trusted_cafile)
    elif tls == "may":
        context = _unverified_context()
    else:
        context = None

    credentials = None
    if parts.username is not None or parts.password is not None:
        user, password = unquote(parts.username or ""), parts.password
        if not user or password is None:
            raise RelayConfigError("relay URL credentials need both a user and a password")
        password = unquote(password)
        if not (user.isascii() and password.isascii()):
            raise RelayConfigError("relay URL credentials must be ASCII")
        credentials = (user, password)

    return Smarthost(
        host,
        port,
        tls=tls,
        implicit_tls=implicit_tls,
        context=context,
        credentials=credentials,
        # An empty name would make the session fall back to "localhost" anyway; say it here.
        helo_name=helo_name or "localhost",
        timeout=timeout,
        trusted_cafile=trusted_cafile,
        sessions=sessions,
    )


def _sessions(value: str | None) -> int:
    if value is None:
        return DEFAULT_SESSIONS
    if not value.isdigit() or not 1 <= int(value) <= MAX_SESSIONS:
        raise RelayConfigError(
            f"relay URL option sessions must be a whole number from 1 to {MAX_SESSIONS}"
        )
    return int(value)


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``: error messages end up in logs."""
    return re.sub(r"//([^/@:]*):[^/@]*@", r"//\1:***@", url)


def _query_options(url: str, query: str) -> dict[str, str]:
    if not query:
        return {}
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise RelayConfigError(f"bad query in relay URL {redact_url(url)!r}") from None
    options: dict[str, str] = {}
    for key, value in pairs:
        if key in options:
            raise RelayConfigError(f"relay URL option {key} given twice")
        if not value:
            raise RelayConfigError(f"relay URL option {key} has no value")
        options[key] = value
    return options


def _unverified_context() -> ssl.SSLContext:
    # Opportunistic TLS protects against passive listeners only; most MX certificates would not
    # verify anyway, so checking would just push mail back to plaintext.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _verifying_context(cafile: str | None, verify: bool, trusted_cafile: str) -> ssl.SSLContext:
    if not verify:
        return _unverified_context()
    try:
        if cafile is None:
            return client_ssl_context(trusted_cafile or None)
        return ssl.create_default_context(cafile=cafile)
    except OSError as error:
        raise RelayConfigError(f"cannot load relay cafile {cafile!r}: {error}") from None
