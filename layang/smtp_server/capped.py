"""What every Layang SMTP server shares: a cap on connections (in all and per client address),
a size refusal that says the limit, and serving the socket the configuration check bound."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP

from layang.smtp_server.limits import ConnectionLimits

# aiosmtpd 1.4's own replies for a message over ``data_size_limit``.
TOO_LARGE_REPLIES = frozenset(
    {
        "552 Error: message size exceeds fixed maximum message size",
        "552 Error: Too much mail data",
    }
)


class CappedSMTP(SMTP):
    """aiosmtpd's session admitted through ``limits``: a connection over the cap is answered
    ``421`` and closed before any other work, so a flood costs one accept each.

    ``connection_made`` counts only the first call: aiosmtpd calls it again after STARTTLS.
    ``size_setting`` names the variable that sets the size limit, for the ``552`` reply.
    """

    size_setting = ""

    def __init__(self, handler: object, *, limits: ConnectionLimits, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.limits = limits
        self._address = ""
        self._counted = False

    def refused(self) -> None:
        """Called when a connection is turned away by the cap."""

    async def push(self, status: str | bytes) -> None:
        # aiosmtpd answers a too-large message itself (a declared SIZE in MAIL, or DATA that
        # runs over) with no hook to word it; say the limit (and the setting that raises it).
        if isinstance(status, str) and status in TOO_LARGE_REPLIES:
            status = f"552 5.3.4 Message too big: the limit is {self.data_size_limit} bytes"
            if self.size_setting:
                status += f" ({self.size_setting})"
        await super().push(status)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if self.transport is None and self._original_transport is None:  # not the STARTTLS
            peer = transport.get_extra_info("peername")
            self._address = str(peer[0]) if peer else ""
            if not self.limits.admit(self._address):
                transport.write(b"421 4.7.0 Too many connections; try again later\r\n")  # type: ignore[attr-defined]
                transport.close()
                self.refused()
                return
            self._counted = True
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        if not self._counted:
            return  # refused in connection_made: aiosmtpd never set this one up
        self._counted = False
        self.limits.release(self._address)
        super().connection_lost(error)


class ListeningController(Controller):
    """aiosmtpd's controller, serving ``listener`` (a bound socket, which it then owns) when
    given, else binding its own host and port."""

    def __init__(
        self,
        handler: object,
        *,
        limits: ConnectionLimits,
        listener: socket.socket | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(handler, **kwargs)
        self.limits = limits
        self.listener = listener

    def _create_server(self) -> Any:
        if self.listener is None:
            return super()._create_server()
        # Serve on the socket bound when the configuration was checked (layang.serving.preflight).
        return self.loop.create_server(
            self._factory_invoker, sock=self.listener, ssl=self.ssl_context
        )
