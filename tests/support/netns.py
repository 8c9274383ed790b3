"""Two hosts on this machine: network namespaces, each joined to the machine by a veth pair.

A process started with ``hosts.run(n, argv)`` has its own network stack (its own loopback, its
own address ``10.213.n.2``) and reaches the machine at the host side of its link. Servers the
test runs on the machine listen on ``hosts.gateway`` (``10.213.1.1``), which both namespaces
reach (a packet for any of the machine's addresses is taken in on any link); ``forward`` makes
a server that listens on the machine's loopback only (PostgreSQL) reachable there too.
Needs root and ``ip``; otherwise the tests skip (fail under ``LAYANG_REQUIRE_TOOLS``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

SUBNET = "10.213"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Hosts:
    """The namespaces of a test and the machine's address on their links."""

    def __init__(self, tag: str, count: int) -> None:
        self.names = [f"lyg{tag}{n}" for n in range(1, count + 1)]
        self.gateway = f"{SUBNET}.1.1"
        self._listeners: list[socket.socket] = []
        self._sockets: list[socket.socket] = []
        for n, name in enumerate(self.names, 1):
            outside, inside = f"v{name}", f"p{name}"
            _ip("netns", "add", name)
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            _ip("link", "set", inside, "netns", name)
            _ip("addr", "add", f"{SUBNET}.{n}.1/24", "dev", outside)
            _ip("link", "set", outside, "up")
            _ip("-n", name, "addr", "add", f"{SUBNET}.{n}.2/24", "dev", inside)
            _ip("-n", name, "link", "set", inside, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            _ip("-n", name, "route", "add", "default", "via", f"{SUBNET}.{n}.1")

    def run(self, index: int, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        """Start ``argv`` inside namespace ``index`` (0-based)."""
        with open(log, "ab") as out:
            return subprocess.Popen(
                ["ip", "netns", "exec", self.names[index], *argv],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def forward(self, target_host: str, target_port: int) -> int:
        """Listen on ``gateway`` and relay every connection to ``target_host:target_port``;
        returns the port listened on."""
        listener = socket.create_server((self.gateway, 0))
        self._listeners.append(listener)

        def pipe(source: socket.socket, sink: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for end in (source, sink):
                    with contextlib.suppress(OSError):
                        end.shutdown(socket.SHUT_RDWR)

        def accept() -> None:
            while True:
                try:
                    client, _ = listener.accept()
                except OSError:
                    return
                upstream = socket.create_connection((target_host, target_port))
                self._sockets += [client, upstream]
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=pipe, args=(a, b), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()
        return listener.getsockname()[1]

    def close(self) -> None:
        for sock in [*self._listeners, *self._sockets]:
            sock.close()
        for name in self.names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
            subprocess.run(["ip", "link", "del", f"v{name}"], capture_output=True)


@pytest.fixture
def two_hosts() -> Iterator[Hosts]:
    """Two namespaces as two hosts (see the module documentation)."""
    missing = os.geteuid() != 0 or shutil.which("ip") is None
    if missing:
        reason = "network namespaces need root and the ip command"
        if os.environ.get("LAYANG_REQUIRE_TOOLS"):
            pytest.fail(reason)
        pytest.skip(reason)
    hosts = Hosts(f"{os.getpid() % 100000}", 2)
    try:
        yield hosts
    finally:
        hosts.close()
