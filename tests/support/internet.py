"""A simulated internet on this machine: a real DNS server (``tests.support.dns_server``) whose
zone names the recipients' domains, and their MX hosts as real SMTP servers
(``tests.support.upstream``) on distinct
loopback addresses (127.0.0.2, 127.0.0.3, … and ::1), all on one port, as port 25 is one port
on every host of the real internet (``LAYANG_MX_PORT`` points Layang at it).

Each server can answer late (``latency``, per reply), say "slow down" after K messages in a
session, greylist (451 on a sender/recipient pair's first try), hang after DATA (``stall``),
or refuse connections (nothing listens on its address); each records what it received and
the most sessions it saw open at once.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from aiosmtpd.smtp import Envelope, Session

from layang.config import Config
from tests.support.dns_server import Zone
from tests.support.upstream import Upstream, _Handler, _TrackedSMTP

SLOW_DOWN = (
    "421 4.7.28 Our system has detected an unusual rate of unsolicited mail originating "
    "from your IP address. To protect our users from spam, mail sent from your IP address "
    "has been temporarily rate limited."
)
GREYLISTED = "451 4.7.1 Greylisted, please try again later"


class _SessionCount(set):
    """The server's open sessions, noting the most ever open at once and when each count
    began (``history``: (monotonic time, open sessions))."""

    def __init__(self, server: MxServer) -> None:
        super().__init__()
        self.server = server

    def add(self, item: Any) -> None:
        super().add(item)
        transport = getattr(item, "transport", None)
        if transport is not None:
            self.server.peers.append(transport.get_extra_info("peername")[0])
        self.server._noted(len(self))

    def discard(self, item: Any) -> None:
        if item in self:
            super().discard(item)
            self.server._noted(len(self))


class MxServer(Upstream):
    """One MX host: an SMTP server at ``host`` on the shared ``port``, named ``name`` in DNS."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        *,
        latency: float = 0.0,
        slow_down_after: int | None = None,
        slow_down_reply: str = SLOW_DOWN,
        greylist: bool = False,
        refuse: bool = False,
        pipelining: bool = True,
        tls_context: ssl.SSLContext | None = None,
        requiretls: bool = False,
    ) -> None:
        self.name = name
        self.slow_down_after = slow_down_after
        self.slow_down_reply = slow_down_reply
        self.greylist = greylist
        self.refuse = refuse
        self.peak_sessions = 0
        self.peers: list[str] = []  # the client address of each session
        self.history: list[tuple[float, int]] = []
        self.slow_downs = 0
        self._greylisted: set[tuple[str, str]] = set()
        self._count_lock = threading.Lock()
        super().__init__(
            host=host,
            port=port,
            pipelining=pipelining,
            tls_context=tls_context,
            requiretls=requiretls,
        )
        self.latency = latency  # before every reply (tests.support.upstream), the greeting included
        self._sessions = _SessionCount(self)

    def start(self) -> None:
        """Serve, unless this host refuses connections (then nothing listens)."""
        if not self.refuse:
            super().start()

    def handler(self) -> _Handler:
        return _MxHandler(self)

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    def delivered_to(self) -> list[str]:
        """Every recipient of every message accepted, in order."""
        return [rcpt for received in self.received for rcpt in received.rcpt_tos]

    def _noted(self, count: int) -> None:
        with self._count_lock:
            self.peak_sessions = max(self.peak_sessions, count)
            self.history.append((time.monotonic(), count))


class _MxHandler(_Handler):
    upstream: MxServer

    async def handle_EHLO(
        self,
        server: _TrackedSMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        return await super().handle_EHLO(server, session, envelope, hostname, responses)

    async def handle_MAIL(
        self, server: _TrackedSMTP, session: Session, envelope: Envelope, *args: Any
    ) -> str:
        mx = self.upstream
        started = getattr(session, "mx_messages", 0) + 1
        session.mx_messages = started  # type: ignore[attr-defined]
        if mx.slow_down_after is not None and started > mx.slow_down_after:
            with mx._count_lock:
                mx.slow_downs += 1
            mx._note("MAIL refused", mx.slow_down_reply)
            if mx.slow_down_reply.startswith("421") and server.transport is not None:
                # 421: the server closes the session once the reply is out.
                # (after the reply, which leaves ``latency`` after the command)
                later = mx.latency + 0.01
                asyncio.get_running_loop().call_later(later, server.transport.close)
            return mx.slow_down_reply
        return await super().handle_MAIL(server, session, envelope, *args)

    async def handle_RCPT(
        self, server: _TrackedSMTP, session: Session, envelope: Envelope, address: str, *a: Any
    ) -> str:
        mx = self.upstream
        if mx.greylist:
            pair = ((envelope.mail_from or "").lower(), address.lower())
            with mx._count_lock:
                first = pair not in mx._greylisted
                mx._greylisted.add(pair)
            if first:
                mx._note("RCPT greylisted", address)
                return GREYLISTED
        return await super().handle_RCPT(server, session, envelope, address, *a)

    async def handle_DATA(self, server: _TrackedSMTP, session: Session, *args: Any) -> str:
        return await super().handle_DATA(server, session, *args)


class Internet:
    """The zone and the MX servers of a test. ``port`` is the one SMTP port of every host."""

    def __init__(self, zone: Zone) -> None:
        self.zone = zone
        self.port = _shared_port()
        self.servers: dict[str, MxServer] = {}
        self._next = 2

    @property
    def resolver(self) -> str:
        """``LAYANG_DNS_RESOLVER`` for this internet's DNS server."""
        return self.zone.address  # type: ignore[attr-defined, no-any-return]

    def configure(self, config: Config) -> Config:
        """``config`` delivering direct to MX on this internet."""
        return replace(config, relay_url="mx:", dns_resolver=self.resolver, mx_port=self.port)

    def server(
        self, name: str, *, ipv6: bool = False, host: str | None = None, **behaviour: Any
    ) -> MxServer:
        """Start an MX host called ``name`` (A record on a fresh 127.0.0.x, or AAAA ::1, or
        on ``host``, an address of this machine)."""
        if host is not None:
            self.zone.add_a(name, host)
        elif ipv6:
            host = "::1"
            self.zone.add_aaaa(name, host)
        else:
            host = f"127.0.0.{self._next}"
            self._next += 1
            self.zone.add_a(name, host)
        server = MxServer(name, host, self.port, **behaviour)
        self.servers[name] = server
        return server

    def domain(self, domain: str, *mx: tuple[int, str]) -> None:
        """Publish ``domain``'s MX records: (preference, host name) pairs."""
        for preference, host in mx:
            self.zone.add_mx(domain, preference, host)

    def standard(self, slow_after: int = 3) -> dict[str, str]:
        """The zone the direct-to-MX tests share, one domain per behaviour; returns
        {behaviour: domain}. The servers are in ``servers`` by host name."""
        self.server("mx.normal.example")
        self.domain("normal.example", (10, "mx.normal.example"))
        self.domain("shared.example", (5, "mx.normal.example"))  # same MX set: same site
        self.server("mx.grey.example", greylist=True)
        self.domain("grey.example", (10, "mx.grey.example"))
        self.server("mx.slow.example", slow_down_after=slow_after)
        self.domain("slow.example", (10, "mx.slow.example"))
        self.server("mx1.backup.example", refuse=True)
        self.server("mx2.backup.example")
        self.domain("backup.example", (10, "mx1.backup.example"), (20, "mx2.backup.example"))
        self.server("mx-a.pair.example")
        self.server("mx-b.pair.example")
        self.domain("pair.example", (10, "mx-a.pair.example"), (10, "mx-b.pair.example"))
        self.zone.add_null_mx("nullmx.example")
        self.server("implicit.example")  # no MX: its own A record
        self.zone.add_a("servfail.example", "127.0.0.1")
        self.zone.servfail.add("servfail.example")
        self.server("mx.hang.example").stall()
        self.domain("hang.example", (10, "mx.hang.example"))
        self.server("gmail-smtp-in.l.google.com")
        self.domain("gmail-hosted.example", (5, "gmail-smtp-in.l.google.com"))
        self.server("mx.v6.example", ipv6=True)
        self.domain("v6.example", (10, "mx.v6.example"))
        self.domain("ghost-mx.example", (10, "mx.nonexistent.example"))  # NXDOMAIN host
        return {
            "normal": "normal.example",
            "shared": "shared.example",
            "greylisting": "grey.example",
            "slow_down": "slow.example",
            "refusing_primary": "backup.example",
            "equal_pair": "pair.example",
            "null_mx": "nullmx.example",
            "implicit_mx": "implicit.example",
            "nxdomain": "missing.example",
            "servfail": "servfail.example",
            "hangs_after_data": "hang.example",
            "provider": "gmail-hosted.example",
            "ipv6": "v6.example",
            "mx_nxdomain": "ghost-mx.example",
        }

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()


def _shared_port() -> int:
    """A port free on the first few loopback addresses and on ::1."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
            port = probe.getsockname()[1]
        try:
            for host, family in (("127.0.0.3", socket.AF_INET), ("::1", socket.AF_INET6)):
                with socket.socket(family) as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise AssertionError("no port free on every loopback address")


@pytest.fixture
def internet(dns_zone: Zone) -> Iterator[Internet]:
    """A simulated internet: add MX servers with ``internet.server(name, …)`` and domains with
    ``internet.domain(domain, (10, name), …)``; the zone is ``internet.zone``."""
    world = Internet(dns_zone)
    yield world
    world.close()
