"""Which way each recipient's copy goes: a route names its destination and its transport.

The configured route (``LAYANG_RELAY_URL``: a smarthost, the capture directory, or ``mx:``,
direct to each recipient domain's MX) takes every recipient but the mailbox simulator's, which
take the simulator route whatever the setting. The destination is what sessions are kept per,
and shaped: the smarthost itself, the capture directory, the simulator; on the ``mx:`` route
each recipient domain's *site*, found by the engine (the route is ``sited``).
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from layang.config import Config
from layang.delivery.capture import CaptureDirectory
from layang.delivery.simulator import MailboxSimulator
from layang.delivery.smarthost import relay_from_url
from layang.delivery.transports import InThread, Transport
from layang.mail.message import SIMULATOR_DOMAIN, is_simulated


@dataclass(frozen=True)
class Route:
    """A way out: ``name`` (``smarthost``, ``capture``, ``simulator``, ``mx``), the
    ``destination`` it reaches, the transport that opens sessions there, whether each
    recipient domain's site is its destination (``sited``, the ``mx:`` route), and how many
    sessions one destination may have at once (None: as many as the worker's connections)."""

    name: str
    destination: str
    transport: Transport
    sited: bool = False
    max_sessions: int | None = None


class Router:
    """The routes of one worker: the configured one, and the simulator's."""

    def __init__(self, configured: Route) -> None:
        self.configured = configured
        simulator = InThread(MailboxSimulator())
        self.simulator = Route("simulator", SIMULATOR_DOMAIN, simulator, max_sessions=1)

    @classmethod
    def from_config(cls, config: Config, transport: Transport | None = None) -> Router:
        """The routes ``LAYANG_RELAY_URL`` sets (``transport``, if given, replaces its own)."""
        url = config.relay_url
        if transport is not None:
            return cls(Route("smarthost", _host_port(url), transport))
        if url.strip() == "mx:":
            from layang.delivery.direct import MxTransport

            return cls(Route("mx", "mx", MxTransport(config), sited=True))
        relay = relay_from_url(
            url, helo_name=socket.gethostname(), trusted_cafile=config.tls_cafile
        )
        if isinstance(relay, CaptureDirectory):
            return cls(Route("capture", str(relay.directory), InThread(relay), max_sessions=1))
        return cls(Route("smarthost", _host_port(url), relay))

    def route_for(self, address: str) -> Route:
        """The route ``address``'s copy takes."""
        return self.simulator if is_simulated(address) else self.configured

    def close(self) -> None:
        """Release what the transports hold (the engine closed every session); the routes
        stay usable."""
        self.configured.transport.close()
        self.simulator.transport.close()


def _host_port(url: str) -> str:
    rest = url.partition("://")[2]
    return rest.rpartition("@")[2].partition("/")[0].partition("?")[0]
