"""Which way each recipient's copy goes: a route names its destination and its transport.

The configured route (``LAYANG_RELAY_URL``: a smarthost, or the capture directory) takes every
recipient but the mailbox simulator's, which take the simulator route whatever the setting.
The destination is what connections are kept per, and later shaped: the smarthost itself, the
capture directory, the simulator.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from layang.config import Config
from layang.delivery.relay import SendResult, relay_from_url
from layang.delivery.simulator import SimulatorRelay
from layang.mail.message import SIMULATOR_DOMAIN, is_simulated


class Transport(Protocol):
    """Something that hands copies to a destination: one transaction per call."""

    def send(
        self,
        mail_from: str,
        recipients: Sequence[str],
        message: bytes,
        *,
        reference: str = "",
        crlf_clean: bool = False,
        attempt: int = 1,
        require_tls: bool = False,
    ) -> SendResult:
        """Send ``message`` to ``recipients``; one result each, never raises for delivery
        problems.

        ``crlf_clean=True`` promises that every line of ``message`` already ends in CRLF (true of
        everything :mod:`layang.mail.compose` builds), which spares a scan of every byte; a
        message from elsewhere (SMTP submission) must leave it False, so that bare CR or LF
        line ends are turned into CRLF before they go out. ``attempt`` counts the tries of these
        recipients (1 for the first); only a transport that makes outcomes up reads it.
        ``require_tls`` asks for RFC 8689's REQUIRETLS (the smarthost honours it).
        """
        ...

    def close(self) -> None:
        """Release any connection held; the transport stays usable."""
        ...


@dataclass(frozen=True)
class Route:
    """A way out: ``name`` (``smarthost``, ``capture``, ``simulator``, ``mx``), the
    ``destination`` it reaches (``mx``: each recipient domain's site, found by the engine), and
    the transport that talks to it."""

    name: str
    destination: str
    transport: Transport


class Router:
    """The routes of one worker: the configured one, and the simulator's."""

    def __init__(self, configured: Route) -> None:
        self.configured = configured
        self.simulator = Route("simulator", SIMULATOR_DOMAIN, SimulatorRelay())

    @classmethod
    def from_config(cls, config: Config, transport: Transport | None = None) -> Router:
        """The routes ``LAYANG_RELAY_URL`` sets (``transport``, if given, replaces its own)."""
        url = config.relay_url
        if url.strip() == "mx:" and transport is None:
            from layang.delivery.direct import MxRoute

            # One destination per recipient domain's site, resolved by the engine.
            return cls(Route("mx", "mx", MxRoute(config)))  # type: ignore[arg-type]
        name = "capture" if url.startswith("capture:") else "smarthost"
        if transport is None:
            transport = relay_from_url(
                url, helo_name=socket.gethostname(), trusted_cafile=config.tls_cafile
            )
        destination = url.partition(":")[2] if name == "capture" else _host_port(url)
        return cls(Route(name, destination, transport))

    def route_for(self, address: str) -> Route:
        """The route ``address``'s copy takes."""
        return self.simulator if is_simulated(address) else self.configured

    def close(self) -> None:
        """Drop every connection held."""
        self.configured.transport.close()
        self.simulator.transport.close()


def _host_port(url: str) -> str:
    rest = url.partition("://")[2]
    return rest.rpartition("@")[2].partition("/")[0].partition("?")[0]
