"""Other hosts on this machine: network namespaces (``ip netns``, needs root), each joined to
this one by a veth pair, so that processes run in them as separate machines would: their own
loopback, their own addresses, reaching this host only over the "network".

What they reach here lives on public-looking addresses added to this host's loopback
interface (``Network.address``): MX servers of the simulated internet (``Internet.server(…,
host=network.address())``), a second DNS server answering from the same zone, and a TCP relay to
the test PostgreSQL (``Network.postgres_url``), since the server only listens on loopback.
Everything is removed when the fixture ends.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import pytest
from dnslib.server import DNSServer

from tests.dns_server import QuietLogger, Zone


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


@dataclass
class Host:
    """A network namespace playing another machine; ``address`` is its own address."""

    namespace: str
    address: str

    def popen(self, args: Sequence[str], **kwargs: object) -> subprocess.Popen:
        """Start ``args`` inside this host."""
        return subprocess.Popen(["ip", "netns", "exec", self.namespace, *args], **kwargs)  # type: ignore[call-overload, no-any-return]

    def run(self, args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.namespace, *args], **kwargs)  # type: ignore[call-overload, no-any-return]


@dataclass
class Network:
    """The hosts, and the public addresses of this machine they reach."""

    prefix: str  # "10.x.y": public addresses are prefix.2, prefix.3, …
    hosts: list[Host] = field(default_factory=list)
    _next: int = 2
    _cleanup: list = field(default_factory=list)

    def address(self) -> str:
        """A fresh public address of this machine (on its loopback interface)."""
        address = f"{self.prefix}.{self._next}"
        self._next += 1
        _ip("addr", "add", f"{address}/32", "dev", "lo")
        self._cleanup.append(lambda: _ip("addr", "del", f"{address}/32", "dev", "lo"))
        return address

    def dns(self, zone: Zone) -> str:
        """A DNS server for ``zone`` on a public address; returns its ``host:port``."""
        address = self.address()
        server = DNSServer(zone, address=address, port=53, logger=QuietLogger())
        server.start_thread()
        self._cleanup.append(lambda: (server.stop(), server.server.server_close()))
        return f"{address}:53"

    def postgres_url(self, url: str) -> str:
        """``url`` (a loopback PostgreSQL) as the hosts reach it: through a TCP relay on a
        public address."""
        parts = urlsplit(url)
        address = self.address()
        relay = _TcpRelay((address, 5432), (parts.hostname or "127.0.0.1", parts.port or 5432))
        self._cleanup.append(relay.close)
        netloc = parts.netloc.rsplit("@", 1)
        where = f"{address}:5432"
        netloc = f"{netloc[0]}@{where}" if len(netloc) == 2 else where
        return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class _TcpRelay:
    """Accepts on ``listen`` and pipes each connection to ``target``, in threads."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(listen)
        self.open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.open.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()
        for sock in list(self.open):
            with contextlib.suppress(OSError):
                sock.close()


def _available() -> str | None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return "network namespaces need root and iproute2"
    return None


@pytest.fixture
def network() -> Iterator[Network]:
    """A network of this machine and two other hosts (``network.hosts``)."""
    problem = _available()
    if problem:
        if os.environ.get("LAYANG_REQUIRE_TOOLS"):
            pytest.fail(problem)
        pytest.skip(problem)
    tag = secrets.token_hex(3)
    second = random.randrange(100, 250)
    third = random.randrange(0, 250)
    made: list[tuple[str, str]] = []
    net = Network(prefix=f"10.{second}.{third}")
    try:
        for index in range(2):
            namespace, outside, inside = f"lyh{tag}{index}", f"lyo{tag}{index}", f"lyi{tag}{index}"
            subnet = f"10.{second}.{third + 1 + index}"
            _ip("netns", "add", namespace)
            made.append(("netns", namespace))
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            made.append(("link", outside))
            _ip("link", "set", inside, "netns", namespace)
            _ip("addr", "add", f"{subnet}.1/30", "dev", outside)
            _ip("link", "set", outside, "up")
            for args in (
                ("addr", "add", f"{subnet}.2/30", "dev", inside),
                ("link", "set", inside, "up"),
                ("link", "set", "lo", "up"),
                ("route", "add", "default", "via", f"{subnet}.1"),
            ):
                _ip("-n", namespace, *args)
            net.hosts.append(Host(namespace, f"{subnet}.2"))
        yield net
    finally:
        for close in reversed(net._cleanup):
            with contextlib.suppress(Exception):
                close()
        for kind, name in reversed(made):
            with contextlib.suppress(subprocess.SubprocessError):
                _ip(kind, "del", name)
