"""The HTTP front of ``layang serve``: gunicorn's ``gthread`` worker, except that a request
thread is given a connection only once its whole request has arrived.

gunicorn's thread worker hands a connection to a thread as soon as its first bytes arrive; the
thread then blocks reading the rest. A client that sends its request a line every few seconds
holds a thread all that time, and as many such clients as threads stop the API answering
anyone. Here the worker's event loop reads the request head and body itself, without blocking,
and only a complete request costs a thread. A request head must arrive within
``HEAD_TIMEOUT`` seconds and a body at ``MIN_BODY_RATE`` bytes/s on average after its first
``BODY_GRACE`` seconds; otherwise the client gets 408 and the connection is closed.

A body over ``layang.serving.body_budget.LARGE_BODY_BYTES`` is read only once the process's
body budget has room for it: until then the connection is left unread (its head only is held),
and after ``WAIT_SECONDS`` it gets 503 with ``Retry-After``.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import time
from dataclasses import dataclass, field
from enum import Enum
from functools import partial
from typing import Any

from gunicorn.http.unreader import Unreader
from gunicorn.http2 import negotiation
from gunicorn.workers.gthread import STOP_KEEPALIVE_LINGER, TConn, ThreadWorker

from layang.serving.body_budget import (
    WAIT_SECONDS,
    BodyBudget,
    hold_for_this_thread,
    over_budget_answer,
    process_budget,
)

HEAD_TIMEOUT = 10.0
BODY_GRACE = 10.0
MIN_BODY_RATE = 32 * 1024
# Beyond gunicorn's own limits (request line 4094 + 100 fields of 8190): its parser answers.
MAX_HEAD_BYTES = 1024 * 1024
MAX_CHUNK_LINE = 1024
_RECV = 256 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class Framing(Enum):
    MORE = "more"  # keep reading
    COMPLETE = "complete"  # the whole request is buffered
    HAND_OVER = "hand over"  # let gunicorn's parser and the app decide (errors, 413)


@dataclass
class RequestFrame:
    """Finds where one HTTP/1.x request ends in a growing buffer, by its head's
    ``Content-Length`` or ``Transfer-Encoding: chunked``, without parsing more than that.

    Anything it cannot frame (a malformed head, a body past ``max_body_bytes``) is
    ``HAND_OVER``: gunicorn's parser and the application answer it as they always have (400,
    413 …), so this class never decides an answer.
    """

    max_body_bytes: int
    head_end: int | None = None
    content_length: int | None = None
    chunked: bool = False
    expect_continue: bool = False
    _scanned: int = 0
    _chunk_at: int = 0

    def check(self, buf: bytes | bytearray) -> Framing:
        if self.head_end is None:
            end = buf.find(b"\r\n\r\n", max(0, self._scanned - 3))
            if end < 0:
                self._scanned = len(buf)
                return Framing.HAND_OVER if len(buf) > MAX_HEAD_BYTES else Framing.MORE
            self.head_end = end + 4
            if not self._read_head(bytes(buf[:end])):
                return Framing.HAND_OVER
            self._chunk_at = self.head_end
        if self.chunked:
            return self._check_chunks(buf)
        length = self.content_length or 0
        if length > self.max_body_bytes:
            return Framing.HAND_OVER
        return Framing.COMPLETE if len(buf) >= self.head_end + length else Framing.MORE

    @property
    def body_received(self) -> int:
        return self._chunk_at - (self.head_end or 0)

    def _read_head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        http11 = lines[0].rstrip().endswith(b"HTTP/1.1")
        lengths, encodings = [], []
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon:
                return False
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                lengths.append(value)
            elif name == b"transfer-encoding":
                encodings.append(value.lower())
            elif name == b"expect":
                self.expect_continue = http11 and value.lower() == b"100-continue"
        if encodings:
            self.chunked = encodings[-1].split(b",")[-1].strip() == b"chunked"
            return self.chunked and not lengths
        if len(lengths) > 1 or (lengths and not lengths[0].isdigit()):
            return False
        self.content_length = int(lengths[0]) if lengths else None
        return True

    def _check_chunks(self, buf: bytes | bytearray) -> Framing:
        while True:
            if self.body_received > self.max_body_bytes:
                return Framing.HAND_OVER
            line_end = buf.find(b"\r\n", self._chunk_at)
            if line_end < 0:
                too_long = len(buf) - self._chunk_at > MAX_CHUNK_LINE
                return Framing.HAND_OVER if too_long else Framing.MORE
            size_text = bytes(buf[self._chunk_at : line_end]).split(b";")[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                return Framing.HAND_OVER
            if size == 0:
                if buf[line_end + 2 : line_end + 4] == b"\r\n":
                    return Framing.COMPLETE
                trailers_end = buf.find(b"\r\n\r\n", line_end)
                if trailers_end >= 0:
                    return Framing.COMPLETE
                return Framing.HAND_OVER if len(buf) > MAX_HEAD_BYTES else Framing.MORE
            chunk_end = line_end + 2 + size + 2
            if len(buf) < chunk_end:
                return Framing.MORE
            self._chunk_at = chunk_end


@dataclass
class Intake:
    """A connection whose request is being read by the event loop."""

    frame: RequestFrame
    started: float
    buf: bytearray = field(default_factory=bytearray)
    body_started: float | None = None
    continue_sent: bool = False
    deadline_cap: float = float("inf")
    reserved: int = 0  # taken from the body budget, given back when the request is done
    parked_since: float | None = None  # waiting for room in the body budget, unread
    discard: int | None = None  # answered 503: bytes of its body still to read and drop

    def deadline(self) -> float:
        if self.body_started is None:
            limit = self.started + HEAD_TIMEOUT
        else:
            received = max(self.frame.body_received, len(self.buf) - (self.frame.head_end or 0))
            limit = self.body_started + BODY_GRACE + received / MIN_BODY_RATE
        return min(limit, self.deadline_cap)


def _timeout_response() -> bytes:
    body = json.dumps(
        {
            "error": "request_timeout",
            "message": (
                f"The request did not arrive in time: its head must arrive within "
                f"{HEAD_TIMEOUT:g} s, its body at {MIN_BODY_RATE // 1024} KiB/s on average."
            ),
            "status": 408,
        }
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


TIMEOUT_RESPONSE = _timeout_response()


def _over_budget_response() -> bytes:
    status, headers, body = over_budget_answer()
    lines = [f"HTTP/1.1 {status.title()}"] + [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join([*lines, "Connection: close", "", ""])).encode() + body


OVER_BUDGET_RESPONSE = _over_budget_response()


class BufferedUnreader(Unreader):
    """gunicorn's reader of a connection, for a request the event loop has read whole: it
    serves those bytes by slices, then reads on from the connection's own unreader.

    gunicorn's ``Unreader`` copies everything it holds on each read (its buffer, then the rest
    after the part returned): for a body of many MiB read 64 KiB at a time that is several
    copies of the body at once and time quadratic in its size. Here each byte is copied once.
    """

    STEP = 64 * 1024  # what an unsized read returns (the parser reading a request head)

    def __init__(self, source: Unreader, data: bytes) -> None:
        super().__init__()
        self.source = source
        self.data = data
        self.pos = 0

    @property
    def sock(self) -> Any:
        return getattr(self.source, "sock", None)

    def chunk(self, size_hint: int | None = None) -> bytes:
        return self.source.chunk(size_hint)

    def read(self, size: int | None = None, read_ahead: int | None = None) -> bytes:
        held = len(self.data) - self.pos
        if not held:
            return self.source.read(size, read_ahead)
        if size is not None and not isinstance(size, int):
            raise TypeError("size parameter must be an int or long.")
        if size == 0:
            return b""
        wanted = self.STEP if size is None or size < 0 else size
        piece = self.data[self.pos : self.pos + wanted]
        self.pos += len(piece)
        if self.pos == len(self.data):
            self.data, self.pos = b"", 0  # all read: let the request's bytes go
        if size is not None and size > 0 and len(piece) < size:
            piece += self.source.read(size - len(piece), read_ahead)
        return piece

    def unread(self, data: bytes) -> None:
        if not data:
            return
        start = self.pos - len(data)
        if start >= 0 and self.data[start : self.pos] == data:
            self.pos = start  # the usual case: what was read past a request head
            return
        if self.pos < len(self.data):
            self.data, self.pos = data + self.data[self.pos :], 0
        else:
            self.source.unread(data)

    def take_buffered(self) -> bytes:
        rest = self.data[self.pos :]
        self.data, self.pos = b"", 0
        return rest + self.source.take_buffered()


class BufferingThreadWorker(ThreadWorker):
    """gunicorn ``gthread`` worker whose request threads only ever see complete requests.

    ``max_body_bytes`` is the largest body worth buffering (a larger one goes to a thread at
    once, for the application's 413); ``buffer_budget`` bounds the bytes buffered in all of a
    process's connections together: past it, a connection is handed to a thread as it is, as
    plain ``gthread`` would. Subclasses set both (``buffering_worker``).
    """

    max_body_bytes: int = 0
    buffer_budget: int = 0
    body_budget_bytes: int = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.intakes: dict[TConn, Intake] = {}
        self.buffered = 0
        self.next_sweep = 0.0
        self.body_budget: BodyBudget = process_budget(self.body_budget_bytes)

    def enqueue_req(self, conn: TConn) -> None:
        """Every way a connection reaches gunicorn's thread pool comes through here (a new
        connection, a kept-alive one that became readable, bytes read ahead): read its
        request first, unless it is already complete or not plain HTTP/1."""
        if getattr(conn, "complete_request", None) is not None or not self._can_buffer(conn):
            super().enqueue_req(conn)
            return
        leftover = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        intake = Intake(RequestFrame(self.max_body_bytes), time.monotonic())
        if not self.alive:
            intake.deadline_cap = intake.started + STOP_KEEPALIVE_LINGER
        self.intakes[conn] = intake
        conn.sock.setblocking(False)
        # Usually the request is there already (a kept-alive connection became readable, a
        # client writes as soon as it connects): read it now rather than after another poll.
        if leftover and self._received(conn, intake, leftover):
            return
        if not self._read(conn, intake):
            self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))

    def _can_buffer(self, conn: TConn) -> bool:
        return not (
            self.cfg.is_ssl
            or conn.is_http2
            or negotiation.prior_knowledge_allowed(self.cfg, conn.client)
        )

    def _on_readable(self, conn: TConn, _sock: Any) -> None:
        intake = self.intakes.get(conn)
        if intake is not None and intake.parked_since is None:
            self._read(conn, intake)

    def _read(self, conn: TConn, intake: Intake) -> bool:
        """Read what has arrived; True when the connection is done here (its request handed
        to a thread, or closed)."""
        try:
            data = conn.sock.recv(_RECV)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            data = b""
        if not data:
            self._close(conn)
            return True
        return self._received(conn, intake, data)

    def _received(self, conn: TConn, intake: Intake, data: bytes) -> bool:
        if intake.discard is not None:
            # The client reads its 503 once it has sent its body: take it, keep none of it.
            intake.discard -= len(data)
            if intake.discard <= 0:
                self._close(conn)
                return True
            return False
        intake.buf += data
        self.buffered += len(data)
        framing = intake.frame.check(intake.buf)
        if intake.frame.head_end is not None and intake.body_started is None:
            intake.body_started = time.monotonic()
        if framing is not Framing.HAND_OVER and not self._admitted(conn, intake):
            return True  # parked: left unread until the budget has room (murder_pending)
        if framing is Framing.MORE and self.buffered > self.buffer_budget:
            framing = Framing.HAND_OVER
        if framing is Framing.MORE:
            if intake.frame.expect_continue and not intake.continue_sent:
                # The client waits for this before it sends the body.
                intake.continue_sent = self._send_now(conn, _CONTINUE)
            return False
        self._forget(conn, intake)
        conn.complete_request = bytes(intake.buf)
        intake.buf = bytearray()
        conn.body_reservation = intake.reserved
        conn.continue_sent = intake.continue_sent
        conn.data_ready = True  # gunicorn's own wait for a first byte is over
        super().enqueue_req(conn)
        return True

    def _admitted(self, conn: TConn, intake: Intake) -> bool:
        """Whether the request may be read on: its body is small, or has its room in the body
        budget. Otherwise the connection is parked, unread, and False returned."""
        if intake.reserved or intake.frame.head_end is None:
            return True
        cost = self.body_budget.cost(intake.frame.content_length or 0)
        if not cost:
            return True
        if self.body_budget.try_take(cost):
            intake.reserved = cost
            return True
        if intake.parked_since is None:
            intake.parked_since = time.monotonic()
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.poller.unregister(conn.sock)
        return False

    def _unpark(self, now: float) -> None:
        """Read on the parked connections that now fit in the body budget, oldest first; answer
        503 to those that waited ``WAIT_SECONDS``."""
        parked = sorted(
            (i.parked_since, id(c), c, i) for c, i in self.intakes.items() if i.parked_since
        )
        for since, _, conn, intake in parked:
            if self._admitted(conn, intake):
                intake.parked_since = None
                intake.body_started = now  # the body's deadline starts now
                if not self._received(conn, intake, b""):
                    self.poller.register(
                        conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn)
                    )
            elif now - since >= WAIT_SECONDS:
                self._refuse(conn, intake, now)

    def _refuse(self, conn: TConn, intake: Intake, now: float) -> None:
        """Answer 503 to a parked request, then read and drop the rest of its body."""
        if not self._send_now(conn, OVER_BUDGET_RESPONSE):
            self._close(conn)
            return
        intake.parked_since = None
        head_end = intake.frame.head_end or 0
        intake.discard = head_end + (intake.frame.content_length or 0) - len(intake.buf)
        self.buffered -= len(intake.buf)
        intake.buf = bytearray()
        intake.body_started = now
        if intake.discard <= 0:
            self._close(conn)
            return
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn))

    def _forget(self, conn: TConn, intake: Intake) -> None:
        del self.intakes[conn]
        self.buffered -= len(intake.buf)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(conn.sock)

    def _close(self, conn: TConn, answer: bytes = b"") -> None:
        intake = self.intakes[conn]
        self.body_budget.give_back(intake.reserved)
        intake.reserved = 0
        self._forget(conn, intake)
        if answer:
            self._send_now(conn, answer)
        self.nr_conns -= 1
        conn.close()

    @staticmethod
    def _send_now(conn: TConn, data: bytes) -> bool:
        """Send a short answer without blocking the event loop; a client whose socket buffer
        is full does not get it."""
        try:
            return conn.sock.send(data) == len(data)
        except OSError:
            return False

    def murder_pending(self) -> None:
        """Besides gunicorn's own, close the connections whose request is late (408 when it
        had begun). When stopping, a request whose head has not arrived within
        ``STOP_KEEPALIVE_LINGER`` is closed unanswered, so that slow clients do not delay the
        stop; bodies under way keep their deadline, as requests in flight."""
        super().murder_pending()
        now = time.monotonic()
        if now < self.next_sweep and self.alive:
            return
        self.next_sweep = now + 0.5
        self._unpark(now)
        for conn, intake in list(self.intakes.items()):
            if intake.parked_since is not None:
                continue
            stopping = not self.alive and intake.body_started is None
            if stopping:
                intake.deadline_cap = min(intake.deadline_cap, now + STOP_KEEPALIVE_LINGER)
            if now >= intake.deadline():
                self._close(conn, TIMEOUT_RESPONSE if intake.buf and not stopping else b"")

    def handle(self, conn: TConn) -> Any:
        """In a request thread: parse the buffered request, never waiting on the client."""
        request = conn.__dict__.pop("complete_request", None)
        reserved = conn.__dict__.pop("body_reservation", 0)
        if request is not None:
            conn.sock.setblocking(True)
            conn.init()
            source = conn.parser.unreader
            if isinstance(source, BufferedUnreader):
                source = source.source  # a kept-alive connection's earlier request
            conn.parser.unreader = BufferedUnreader(source, request)
            del request
        hold_for_this_thread(reserved)
        try:
            return super().handle(conn)
        finally:
            hold_for_this_thread(0)
            self.body_budget.give_back(reserved)

    def handle_request(self, req: Any, conn: TConn) -> bool:
        if conn.__dict__.pop("continue_sent", False):
            # Already sent while the body was read; gunicorn would send a second one.
            req._expected_100_continue = False
        return super().handle_request(req, conn)

    def run(self) -> None:
        try:
            super().run()
        finally:
            for conn in list(self.intakes):
                self._close(conn)


def buffering_worker(
    max_body_bytes: int, body_budget_bytes: int = 256 * 1024 * 1024
) -> type[BufferingThreadWorker]:
    """The worker class for a service whose request bodies may be ``max_body_bytes`` long,
    large bodies admitted under a budget of ``body_budget_bytes`` (``body_budget``).

    A process buffers at most twice that (at least 64 MiB) in all its connections together.
    """
    return type(
        "BufferingThreadWorker",
        (BufferingThreadWorker,),
        {
            "max_body_bytes": max_body_bytes,
            "body_budget_bytes": body_budget_bytes,
            "buffer_budget": max(2 * max_body_bytes, 64 * 1024 * 1024),
            "__module__": __name__,
        },
    )
