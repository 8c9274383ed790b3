"""A real SMTP server (aiosmtpd) playing the recipients' mail server in tests.

It records what arrives (``reads`` keeps each chunk as the server read it, which shows what the
client wrote together), can be told how to answer (``script_rcpt``, ``script_mail``,
``script_data_command``, ``script_data``), can offer PIPELINING, can hold a DATA in flight
(``stall``/``release``) and can drop its sessions like an idle timeout would (``kick``).
"""

from __future__ import annotations

import asyncio
import contextlib
import email
import email.policy
import ipaddress
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from layang.submission.server import take_requiretls

HOST = "127.0.0.1"
SERVER_NAME = "upstream.test"
DEFAULT_MAIL = "250 OK"
DEFAULT_RCPT = "250 OK"
DEFAULT_DATA = "250 2.0.0 OK queued"
NO_VALID_RECIPIENTS = "554 5.5.1 Error: no valid recipients"


def make_self_signed_cert(directory: Path, hostname: str = "localhost") -> tuple[Path, Path]:
    """Write a self-signed certificate and its key into ``directory``; returns (cert, key).

    Valid for ``hostname``, ``localhost`` and 127.0.0.1, and usable as a ``cafile`` to trust it.
    """
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    names: list[x509.GeneralName] = [x509.DNSName(hostname)]
    if hostname != "localhost":
        names.append(x509.DNSName("localhost"))
    names.append(x509.IPAddress(ipaddress.ip_address(HOST)))
    now = datetime.now(UTC)
    public_key = key.public_key()
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=7))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(public_key), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    certfile, keyfile = directory / "cert.pem", directory / "key.pem"
    certfile.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    keyfile.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return certfile, keyfile


def server_tls_context(certfile: Path, keyfile: Path) -> ssl.SSLContext:
    """A server-side TLS context presenting the given certificate."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certfile, keyfile)
    return context


@dataclass
class Received:
    """One message the server accepted (its DATA was answered 2xx)."""

    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    tls: bool
    auth_user: str | None
    peer: str = ""  # the client's address

    @property
    def message(self) -> EmailMessage:
        """The data parsed with the modern email policy."""
        parsed = email.message_from_bytes(self.data, policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


class Upstream:
    """A running aiosmtpd server on 127.0.0.1 with an ephemeral port.

    ``tls_context`` offers STARTTLS; ``ssl_context`` makes it implicit TLS (smtps) instead.
    ``auth_users`` (user → password) enables AUTH PLAIN/LOGIN, only over TLS. ``cafile`` is the
    certificate a client should trust, used in ``url``. ``pipelining`` advertises PIPELINING
    (aiosmtpd handles pipelined commands either way; it just does not say so).
    """

    def __init__(
        self,
        *,
        tls_context: ssl.SSLContext | None = None,
        ssl_context: ssl.SSLContext | None = None,
        auth_users: dict[str, str] | None = None,
        cafile: Path | None = None,
        pipelining: bool = False,
        host: str = HOST,
        port: int = 0,
        requiretls: bool = False,
        smtputf8: bool = True,
    ) -> None:
        self.pipelining = pipelining
        # Offer RFC 6531's SMTPUTF8 (as aiosmtpd's Controller does by default); MAIL commands
        # carrying it are noted as ("SMTPUTF8", its arguments) in ``attempts``.
        self.smtputf8 = smtputf8
        # Offer RFC 8689's REQUIRETLS once TLS is up; MAIL commands carrying it are noted as
        # ("REQUIRETLS", sender) in ``attempts``.
        self.requiretls = requiretls
        self.tls_context = tls_context
        self.ssl_context = ssl_context
        self.auth_users = dict(auth_users or {})
        self.cafile = cafile
        self.host = host
        self.port = port
        self.received: list[Received] = []
        self.data_seen: list[bytes] = []
        self.attempts: list[tuple[str, str]] = []
        self.reads: list[bytes] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._mail_script: deque[str] = deque()
        self._rcpt_scripts: dict[str, deque[str]] = {}
        self._data_script: deque[str] = deque()
        self._data_command_script: deque[str] = deque()
        self._connections = 0
        self.peak_connections = 0  # the most connections open at once
        self.chunking = False  # offer CHUNKING (RFC 3030 BDAT)
        self._stalled = False
        self._in_stall = threading.Event()
        self.data_delay = 0.0
        self.latency = 0.0  # seconds before every reply, the greeting included
        self.greeted: list[tuple[str, str]] = []  # (client address, EHLO name) per session
        # Bytes written in the same write as the 220 to STARTTLS, before the handshake: what a
        # man in the middle injects to have them read as replies of the TLS phase.
        self.starttls_injection = b""
        self._slow: dict[str, float] = {}
        self._hung: set[str] = set()
        self._sessions: set[_TrackedSMTP] = set()  # touched only on the server's loop
        self._controller: _Controller | None = None
        self.start()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start serving; after a ``stop`` the same port is reused."""
        if self._controller is not None:
            return
        fixed = self.port
        last_error: OSError | None = None
        for _ in range(5):
            port = fixed or _free_port()
            controller = _Controller(self, port)
            try:
                controller.start()
            except OSError as error:  # lost the race for the port
                _dispose(controller)
                last_error = error
                time.sleep(0.05)
                continue
            except BaseException:
                _dispose(controller)
                raise
            self._controller, self.port = controller, port
            return
        raise AssertionError(f"could not start the upstream SMTP server: {last_error}")

    def stop(self) -> None:
        """Drop every session and stop the server thread. Idempotent."""
        controller, self._controller = self._controller, None
        if controller is None:
            return
        self.release()
        with contextlib.suppress(Exception):
            self._on_loop(controller, self._close_sessions(abort=True))
        controller.stop()

    def __enter__(self) -> Upstream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """The relay URL reaching this server the way it is meant to be reached."""
        base = f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"
        if self.ssl_context is not None:
            if self.cafile is not None:
                return f"smtps://{base}?cafile={quote(str(self.cafile), safe='/')}"
            return f"smtps://{base}?verify=off"
        if self.tls_context is not None:
            return f"smtp://{base}"
        return f"smtp://{base}?tls=off"

    @property
    def connections(self) -> int:
        """How many SMTP sessions said EHLO/HELO so far."""
        with self._lock:
            return self._connections

    # -- steering --------------------------------------------------------------------------

    def script_mail(self, *replies: str) -> None:
        """Answer the next MAIL FROM commands with ``replies``, then with 250 again."""
        with self._lock:
            self._mail_script.extend(replies)

    def script_rcpt(self, address: str, *replies: str) -> None:
        """Answer the next RCPT TO of ``address`` with ``replies``, one each, then 250."""
        with self._lock:
            self._rcpt_scripts.setdefault(address.lower(), deque()).extend(replies)

    def script_data_command(self, *replies: str) -> None:
        """Answer the next DATA commands themselves (before any message) with ``replies``.

        A refusal leaves the transaction open, as real servers do. A ``354`` reply takes the
        message even when no recipient was accepted (what a pipelining server may do), and
        answers its end with the next ``script_data`` reply or ``NO_VALID_RECIPIENTS``.
        """
        with self._lock:
            self._data_command_script.extend(replies)

    def script_data(self, *replies: str) -> None:
        """Answer the next ends of DATA with ``replies``, then ``250 2.0.0 OK queued``."""
        with self._lock:
            self._data_script.extend(replies)

    def slow_down(self, seconds: float, *addresses: str) -> None:
        """Answer the end of DATA only after ``seconds``: for messages to ``addresses``, or
        for every message when none are named."""
        if addresses:
            with self._lock:
                self._slow.update({address.lower(): seconds for address in addresses})
        else:
            self.data_delay = seconds

    def hang(self, *addresses: str) -> None:
        """Hold the end of DATA of messages to ``addresses`` until ``release``; others go on."""
        self._in_stall.clear()
        with self._lock:
            self._hung.update(address.lower() for address in addresses)

    def stall(self) -> None:
        """Hold every end of DATA, without answering, until ``release``."""
        self._in_stall.clear()
        self._stalled = True

    def release(self) -> None:
        """Let stalled and hung DATA commands be answered."""
        self._stalled = False
        with self._lock:
            self._hung.clear()

    def wait_stalled(self, timeout: float = 10) -> bool:
        """Whether a DATA got held by ``stall`` within ``timeout`` seconds."""
        return self._in_stall.wait(timeout)

    def kick(self) -> None:
        """Close every open session from the server side, as an idle timeout would."""
        if self._controller is not None:
            self._on_loop(self._controller, self._close_sessions(abort=False))

    def wait_for(self, count: int, timeout: float = 10) -> list[Received]:
        """Block until at least ``count`` messages were accepted; returns them all.

        Raises AssertionError, saying what did arrive, when ``timeout`` runs out first.
        """
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self.received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"expected {count} message(s) upstream within {timeout}s, got "
                        f"{len(self.received)}; commands seen: {self.attempts[-20:]}"
                    )
                self._arrived.wait(left)
            return list(self.received)

    # -- server side (runs on the server's event loop) -------------------------------------

    def _read(self, chunk: bytes) -> None:
        with self._lock:
            self.reads.append(chunk)

    def _note(self, verb: str, argument: str) -> None:
        with self._lock:
            self.attempts.append((verb, argument))

    def _next(self, script: deque[str], default: str) -> str:
        with self._lock:
            return script.popleft() if script else default

    def _next_rcpt(self, address: str) -> str:
        with self._lock:
            script = self._rcpt_scripts.get(address.lower())
            return script.popleft() if script else DEFAULT_RCPT

    def _count(self, server: _TrackedSMTP) -> None:
        if not server.counted:
            server.counted = True
            with self._lock:
                self._connections += 1

    async def _hold(self, recipients: list[str]) -> None:
        keys = [r.lower() for r in recipients]
        with self._lock:
            delay = max([self.data_delay, *(self._slow.get(k, 0.0) for k in keys)])
        if delay:
            await asyncio.sleep(delay)
        while self._stalled or self._is_hung(keys):
            self._in_stall.set()
            await asyncio.sleep(0.01)

    def _is_hung(self, keys: list[str]) -> bool:
        with self._lock:
            return any(k in self._hung for k in keys)

    def _accept(self, received: Received) -> None:
        with self._arrived:
            self.received.append(received)
            self._arrived.notify_all()

    def _authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        if isinstance(data, LoginPassword):
            user = data.login.decode("utf-8", "replace")
            password = data.password.decode("utf-8", "replace")
            if user in self.auth_users and self.auth_users[user] == password:
                return AuthResult(success=True, auth_data=user)
        return AuthResult(success=False, handled=False)

    async def _close_sessions(self, abort: bool) -> None:
        for session in list(self._sessions):
            if session.transport is not None:
                if abort:
                    session.transport.abort()
                else:
                    session.transport.close()
        deadline = time.monotonic() + 2
        while self._sessions and time.monotonic() < deadline:
            await asyncio.sleep(0.005)

    def handler(self) -> _Handler:
        """The aiosmtpd handler answering for this server."""
        return _Handler(self)

    def _on_loop(self, controller: _Controller, coroutine: Any) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, controller.loop).result(5)


class _Handler:
    """aiosmtpd hooks, answering as the owning ``Upstream`` is told to."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    async def handle_EHLO(
        self,
        server: _TrackedSMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname
        self.upstream._count(server)
        self.upstream._note("EHLO", hostname)
        self.upstream.greeted.append((session.peer[0], hostname))
        if not self.upstream.auth_users:
            # Otherwise aiosmtpd would still advertise an (empty) AUTH once TLS is up.
            responses = [r for r in responses if not r[4:].upper().startswith("AUTH")]
        if self.upstream.pipelining:
            responses = [*responses[:-1], "250-PIPELINING", responses[-1]]
        if self.upstream.chunking:
            responses = [*responses[:-1], "250-CHUNKING", responses[-1]]
        if self.upstream.requiretls and session.ssl is not None:
            responses = [*responses[:-1], "250-REQUIRETLS", responses[-1]]
        return responses

    async def handle_HELO(
        self, server: _TrackedSMTP, session: Session, envelope: Envelope, hostname: str
    ) -> str:
        session.host_name = hostname
        self.upstream._count(server)
        self.upstream._note("HELO", hostname)
        return f"250 {server.hostname}"

    def handle_STARTTLS(self, server: SMTP, session: Session, envelope: Envelope) -> bool:
        self.upstream._note("STARTTLS", "")
        return True

    async def handle_MAIL(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        options: list[str],
    ) -> str:
        self.upstream._note("MAIL", address)
        reply = self.upstream._next(self.upstream._mail_script, DEFAULT_MAIL)
        if reply.startswith("2"):
            envelope.mail_from = address
            envelope.mail_options.extend(options)
        return reply

    async def handle_RCPT(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        options: list[str],
    ) -> str:
        self.upstream._note("RCPT", address)
        reply = self.upstream._next_rcpt(address)
        if reply.startswith("2"):
            envelope.rcpt_tos.append(address)
            envelope.rcpt_options.extend(options)
        return reply

    async def handle_RSET(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.upstream._note("RSET", "")
        return "250 OK"

    async def handle_QUIT(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.upstream._note("QUIT", "")
        return "221 Bye"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        upstream = self.upstream
        data = envelope.original_content or b""
        upstream._note("DATA", envelope.mail_from or "")
        with upstream._lock:
            upstream.data_seen.append(data)
        await upstream._hold(list(envelope.rcpt_tos))
        reply = upstream._next(upstream._data_script, DEFAULT_DATA)
        if reply.startswith("2"):
            transport = server.transport
            tls = session.ssl is not None or (
                transport is not None and transport.get_extra_info("ssl_object") is not None
            )
            upstream._accept(
                Received(
                    mail_from=envelope.mail_from or "",
                    rcpt_tos=list(envelope.rcpt_tos),
                    data=data,
                    tls=tls,
                    auth_user=session.auth_data if session.authenticated else None,
                    peer=session.peer[0] if session.peer else "",
                )
            )
        return reply


class _TrackedSMTP(SMTP):
    """The SMTP protocol, registering itself so the server can drop its sessions."""

    def __init__(self, upstream: Upstream, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.upstream = upstream
        self.counted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.upstream._sessions.add(self)
        self.upstream.peak_connections = max(
            self.upstream.peak_connections, len(self.upstream._sessions)
        )

    def connection_lost(self, error: Exception | None) -> None:
        self.upstream._sessions.discard(self)
        super().connection_lost(error)

    def data_received(self, data: bytes) -> None:
        self.upstream._read(data)
        super().data_received(data)

    async def push(self, status: Any) -> None:
        if self.upstream.latency:
            await asyncio.sleep(self.upstream.latency)
        injection = self.upstream.starttls_injection
        if injection and status == "220 Ready to start TLS":
            status = status.encode() + b"\r\n" + injection.removesuffix(b"\r\n")
        await super().push(status)

    async def smtp_MAIL(self, arg: str) -> None:
        arg, requiretls = take_requiretls(arg)
        if requiretls:
            if not self.upstream.requiretls:
                await self.push("555 5.5.4 MAIL FROM parameters not recognized")
                return
            self.upstream._note("REQUIRETLS", arg or "")
        if "SMTPUTF8" in (arg or "").upper().split():
            self.upstream._note("SMTPUTF8", arg or "")
        await super().smtp_MAIL(arg)

    async def smtp_BDAT(self, arg: str) -> None:
        """RFC 3030: ``BDAT <size> [LAST]``, then exactly ``size`` bytes (always read, even
        when refused); the message is handled as DATA's is once the last chunk came."""
        upstream = self.upstream
        size, _, last = arg.strip().partition(" ")
        if not upstream.chunking or not size.isdigit() or last.upper() not in ("", "LAST"):
            await self.push("501 5.5.4 Syntax: BDAT <size> [LAST]")
            return
        chunk = await self._reader.readexactly(int(size))
        upstream._note("BDAT", arg)
        chunks = self.__dict__.setdefault("chunks", [])
        if self.envelope.mail_from is None or not self.envelope.rcpt_tos:
            chunks.clear()
            await self.push("554 5.5.1 Error: no valid recipients")
            return
        chunks.append(chunk)
        if not last:
            await self.push(f"250 2.0.0 {size} octets received")
            return
        data = b"".join(chunks)
        chunks.clear()
        self.envelope.original_content = data
        self.envelope.content = data
        status = await self._call_handler_hook("DATA")
        self._set_post_data_state()
        await self.push(status)

    async def smtp_DATA(self, arg: str) -> None:
        upstream = self.upstream
        reply = upstream._next(upstream._data_command_script, "")
        if not reply or (reply.startswith("354") and self.envelope.rcpt_tos):
            await super().smtp_DATA(arg)
        elif not reply.startswith("354"):
            upstream._note("DATA refused", reply)
            await self.push(reply)
        else:
            await self.push(reply)
            lines = []
            while (line := await self._reader.readuntil(b"\r\n")) != b".\r\n":
                lines.append(line[1:] if line.startswith(b".") else line)
            upstream._note("DATA", self.envelope.mail_from or "")
            with upstream._lock:
                upstream.data_seen.append(b"".join(lines))
            self._set_post_data_state()
            await self.push(upstream._next(upstream._data_script, NO_VALID_RECIPIENTS))


class _Controller(Controller):
    def __init__(self, upstream: Upstream, port: int) -> None:
        extra: dict[str, Any] = {}
        if upstream.auth_users:
            extra["authenticator"] = upstream._authenticate
        else:
            extra["auth_exclude_mechanism"] = ["LOGIN", "PLAIN"]
        super().__init__(
            upstream.handler(),
            hostname=upstream.host,
            port=port,
            ssl_context=upstream.ssl_context,
            server_hostname=SERVER_NAME,
            tls_context=upstream.tls_context,
            require_starttls=False,
            auth_require_tls=True,
            ready_timeout=5.0,
            enable_SMTPUTF8=upstream.smtputf8,
            **extra,
        )
        self.upstream = upstream

    def factory(self) -> SMTP:
        return _TrackedSMTP(self.upstream, self.handler, **self.SMTP_kwargs)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def _dispose(controller: _Controller) -> None:
    """Tear down a controller whose start failed, leaving no thread or loop behind."""
    with contextlib.suppress(Exception):
        controller.stop(no_assert=True)
    if not controller.loop.is_closed():
        controller.loop.close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    """A plain SMTP upstream (no TLS, no AUTH); ``url`` has ``tls=off``."""
    with Upstream() as server:
        yield server


@pytest.fixture
def tls_upstream(tmp_path: Path) -> Iterator[Upstream]:
    """An upstream offering STARTTLS with a self-signed certificate (``.cafile`` trusts it)."""
    certfile, keyfile = make_self_signed_cert(tmp_path / "upstream-tls")
    with Upstream(tls_context=server_tls_context(certfile, keyfile), cafile=certfile) as server:
        yield server
