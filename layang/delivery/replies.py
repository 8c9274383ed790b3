"""Reading an SMTP server's replies as they arrive, for one client session, and wording what
went wrong with the connection.

A reply may span several lines (``250-…`` then ``250 …``, RFC 5321 section 4.2.1); replies to
pipelined commands arrive together and are taken in order. The reader is the connection's
asyncio protocol: it parses what comes, and wakes the one coroutine waiting for a reply with a
single timer, not a task per wait.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import ssl
from collections.abc import Callable

MAX_LINE = 8192
"""Longer than this (four times over, unparsed) and the server is not speaking SMTP."""


class Lost(Exception):
    """The connection failed (or a reply did not come in time); ``reply`` says how."""

    def __init__(self, reply: str) -> None:
        super().__init__(reply)
        self.reply = reply


class ReplyReader(asyncio.Protocol):
    """The replies of the server at ``where``; ``describe`` words a connection error."""

    def __init__(self, where: str, describe: Callable[[BaseException], str]) -> None:
        self.where = where
        self.describe = describe
        self.transport: asyncio.BaseTransport | None = None
        self.buffer = bytearray()
        self.lines: list[str] = []
        self.ready: collections.deque[tuple[int, str]] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.failure: str | None = None

    async def next(self, timeout: float) -> tuple[int, str]:
        """The next reply: its code (0 if unparseable) and its text lines joined by newlines.
        Replies that came already are taken at once. Raises :class:`Lost`."""
        if not self.ready:
            if self.failure is None:
                waiter = asyncio.get_running_loop().create_future()
                self.waiter = waiter
                timer = waiter.get_loop().call_later(timeout, _expire, waiter)
                try:
                    await waiter
                finally:
                    timer.cancel()
                    self.waiter = None
            if not self.ready:
                raise Lost(self.failure or f"timed out after {timeout:g}s talking to {self.where}")
        return self.ready.popleft()

    @property
    def pending(self) -> int:
        """How many bytes came that no reply has been taken for: whole replies not read yet,
        lines of a reply not ended, part of a line."""
        unread = sum(4 + len(text) for _, text in self.ready)
        return unread + sum(len(line) + 1 for line in self.lines) + len(self.buffer)

    def forget(self) -> None:
        """Start over with nothing read, as a new connection would (the TLS phase after
        STARTTLS: RFC 3207 section 4.2)."""
        self.buffer.clear()
        self.lines = []
        self.ready.clear()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        start = 0
        while (end := buffer.find(b"\n", start)) >= 0:
            line = buffer[start:end].decode("utf-8", errors="replace").rstrip("\r")
            start = end + 1
            if line[3:4] == "-":
                self.lines.append(line)
                continue
            try:
                code = int(line[:3])
            except ValueError:
                code = 0
            if self.lines:
                self.lines.append(line)
                self.ready.append((code, "\n".join(each[4:] for each in self.lines)))
                self.lines = []
            else:
                self.ready.append((code, line[4:]))
        if start:
            del buffer[:start]
        if len(buffer) > MAX_LINE * 4:
            self._fail(f"connection to {self.where} lost: line too long")
            if self.transport is not None:
                with contextlib.suppress(Exception):  # a broken transport is already gone
                    self.transport.abort()  # type: ignore[attr-defined]
        elif self.ready:
            self._wake()

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost follows

    def connection_lost(self, error: Exception | None) -> None:
        if error is None:
            reason = f"connection to {self.where} lost: Connection unexpectedly closed"
        else:
            reason = self.describe(error)
        self._fail(reason)

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason
        self._wake()

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def failure(
    error: BaseException,
    where: str,
    host: str,
    timeout: float,
    *,
    connecting: bool = False,
    handshake: bool = False,
) -> str:
    """What went wrong with the connection to ``where`` (``host``), as a reply's text: what
    a recipient's Delay shows."""
    if handshake and not isinstance(error, (ssl.SSLError, TimeoutError)):
        # A server giving up on the handshake resets the connection, often without a word.
        return f"TLS with {where} failed: {error or type(error).__name__}"
    if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
        return f"timed out after {timeout:g}s talking to {where}"
    if isinstance(error, ConnectionRefusedError):
        return f"connection refused by {where}: {error}"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve {host}: {error}"
    if isinstance(error, ssl.SSLCertVerificationError):
        return f"TLS certificate of {where} not accepted: {error.verify_message}"
    if isinstance(error, ssl.SSLError):
        return f"TLS with {where} failed: {error}"
    if connecting:
        return f"cannot connect to {where}: {error}"
    return f"network error talking to {where}: {error}"
