"""The latency sink: an asyncio SMTP sink whose every reply leaves L ms after the command it
answers arrived (pipelined commands do not add up; a stand-in for a link's round trip that
loopback lacks), optionally holding the reply to the end of DATA for longer (a content scan). It
counts a delivery per recipient of each completed DATA and notes when the last one expected was
answered.

It offers CHUNKING (RFC 3030: ``BDAT n [LAST]``, exactly n octets after the command, one reply per
chunk, the message's reply to the ``LAST`` one) as Postfix ≥ 3.4, Gmail and Microsoft do, unless
started with ``--no-chunking`` (then PIPELINING only).

It runs in its own process (``python -m bench.support.latency_sink PORT [--no-chunking]``),
driven over its stdin and stdout by :class:`Sink`; :class:`PostfixSink` drives Postfix's
``smtp-sink`` (replies at once) the same way.
"""

from __future__ import annotations

import asyncio
import collections
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.support.machine import wait_port
from bench.support.postfix import SBIN

ROOT = Path(__file__).resolve().parents[2]
SMTP_SINK_SESSIONS = 4096


class SinkState:
    """Settings and counters shared by the sink's sessions; ``out`` gets the control answers."""

    def __init__(self) -> None:
        self.latency = 0.0
        self.data_delay = 0.0
        self.chunking = True
        self.delivered = 0
        self.expected = 0
        self.first: float | None = None
        self.marks: list[int] = []

    def expect(self, count: int, marks: list[int]) -> None:
        self.delivered, self.expected, self.first, self.marks = 0, count, None, sorted(marks)

    def count(self, recipients: int, now: float) -> None:
        if self.first is None:
            self.first = now
        before = self.delivered
        self.delivered += recipients
        while self.marks and self.marks[0] <= self.delivered:
            print(f"mark {self.marks.pop(0)} {now:.6f}", flush=True)
        if before < self.expected <= self.delivered:
            print(f"done {self.first:.6f} {now:.6f} {self.delivered}", flush=True)


class SinkSession(asyncio.Protocol):
    """One SMTP session; each reply is due ``latency`` after its command arrived (plus
    ``data_delay`` for the end of DATA), and replies leave in order."""

    def __init__(self, state: SinkState) -> None:
        self.state = state
        self.buffer = bytearray()
        self.in_data = False
        self.scan = 0
        self.recipients = 0
        # BDAT: octets of the current chunk still to read, whether it is the last, and whether
        # a chunk of this transaction was refused (the rest of it is read and refused too).
        self.chunk_left = 0
        self.chunk_last = False
        self.in_chunk = False
        self.chunks_refused = False
        self.pending: collections.deque[tuple[float, bytes, int, bool]] = collections.deque()
        self.timer: asyncio.TimerHandle | None = None
        self.last_due = 0.0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.reply(b"220 sink.bench ESMTP\r\n", time.monotonic())

    def connection_lost(self, error: Exception | None) -> None:
        self.closed = True
        if self.timer is not None:
            self.timer.cancel()

    def reply(
        self,
        data: bytes,
        arrived: float,
        extra: float = 0.0,
        recipients: int = 0,
        close: bool = False,
    ) -> None:
        due = max(arrived + self.state.latency + extra, self.last_due)
        self.last_due = due
        self.pending.append((due, data, recipients, close))
        if self.timer is None:
            self.flush()

    def flush(self) -> None:
        self.timer = None
        if self.closed:
            return
        now = time.monotonic()
        out, recipients, close = [], 0, False
        while self.pending and self.pending[0][0] <= now + 0.0002:
            _, data, count, last = self.pending.popleft()
            out.append(data)
            recipients += count
            close = close or last
        if out:
            self.transport.write(b"".join(out))
        if recipients:
            self.state.count(recipients, now)
        if close:
            self.closed = True
            self.transport.close()
        elif self.pending:
            delay = self.pending[0][0] - now
            self.timer = asyncio.get_running_loop().call_later(delay, self.flush)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.buffer += data
        while not self.closed:
            if self.in_chunk:
                taken = min(self.chunk_left, len(self.buffer))
                del self.buffer[:taken]
                self.chunk_left -= taken
                if self.chunk_left:
                    return
                self.in_chunk = False
                self.chunk_done(now)
                continue
            if self.in_data:
                end = self.buffer.find(b"\r\n.\r\n", self.scan)
                if end < 0:
                    self.scan = max(len(self.buffer) - 4, 0)
                    return
                del self.buffer[: end + 5]
                self.in_data, self.scan = False, 0
                recipients, self.recipients = self.recipients, 0
                self.reply(b"250 2.0.0 Ok: queued\r\n", now, self.state.data_delay, recipients)
                continue
            end = self.buffer.find(b"\r\n")
            if end < 0:
                if len(self.buffer) > 4096:
                    self.transport.close()
                return
            line = bytes(self.buffer[:end])
            del self.buffer[: end + 2]
            self.command(line, now)

    def chunk_done(self, now: float) -> None:
        """A BDAT chunk has been read whole: its reply (RFC 3030 §2), the message's on LAST."""
        if self.chunks_refused or not self.recipients:
            self.chunks_refused = not self.chunk_last
            self.reply(b"503 5.5.1 Error: need RCPT command\r\n", now)
            return
        if not self.chunk_last:
            self.reply(b"250 2.0.0 Ok: chunk received\r\n", now)
            return
        recipients, self.recipients = self.recipients, 0
        self.reply(b"250 2.0.0 Ok: queued\r\n", now, self.state.data_delay, recipients)

    def bdat(self, line: bytes, now: float) -> None:
        """``BDAT n [LAST]``: the next n octets are the chunk, whatever they hold."""
        words = line.split()
        last = len(words) == 3 and words[2].upper() == b"LAST"
        if len(words) not in (2, 3) or not words[1].isdigit() or (len(words) == 3 and not last):
            # The size is unknown, so nothing can be skipped: the session cannot go on.
            self.reply(b"501 5.5.4 Syntax: BDAT size [LAST]\r\n", now, close=True)
            return
        self.chunk_left, self.chunk_last, self.in_chunk = int(words[1]), last, True

    def command(self, line: bytes, now: float) -> None:
        verb = line[:4].upper()
        if verb == b"EHLO":
            chunking = b"250-CHUNKING\r\n" if self.state.chunking else b""
            self.reply(
                b"250-sink.bench\r\n250-PIPELINING\r\n250-SIZE 104857600\r\n"
                + chunking
                + b"250-ENHANCEDSTATUSCODES\r\n250 8BITMIME\r\n",
                now,
            )
        elif verb == b"BDAT" and self.state.chunking:
            self.bdat(line, now)
        elif verb == b"HELO":
            self.reply(b"250 sink.bench\r\n", now)
        elif verb == b"MAIL":
            self.recipients, self.chunks_refused = 0, False
            self.reply(b"250 2.1.0 Ok\r\n", now)
        elif verb == b"RCPT":
            self.recipients += 1
            self.reply(b"250 2.1.5 Ok\r\n", now)
        elif verb == b"DATA":
            if not self.recipients:
                self.reply(b"503 5.5.1 Error: need RCPT command\r\n", now)
                return
            self.reply(b"354 End data with <CR><LF>.<CR><LF>\r\n", now)
            # The terminator's CRLF may be the one that ended the DATA line (an empty body).
            self.buffer[:0] = b"\r\n"
            self.in_data = True
        elif verb == b"RSET":
            self.recipients, self.chunks_refused = 0, False
            self.reply(b"250 2.0.0 Ok\r\n", now)
        elif verb == b"NOOP":
            self.reply(b"250 2.0.0 Ok\r\n", now)
        elif verb == b"QUIT":
            self.reply(b"221 2.0.0 Bye\r\n", now, close=True)
        else:
            self.reply(b"502 5.5.2 Error: command not recognized\r\n", now)


async def control(
    state: SinkState, more: dict[str, Callable[[list[str]], str]] | None = None
) -> None:
    """Answer the control lines on stdin until it closes: ``set LATENCY_MS DATA_MS``, ``expect
    COUNT [MARK...]``, ``count``, and ``more`` (each word's handler gets the line's words and
    returns the answer), printing ``ready`` first."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("ready", flush=True)
    while line := (await reader.readline()).decode():
        words = line.split()
        if words[0] == "set":
            state.latency, state.data_delay = float(words[1]) / 1000, float(words[2]) / 1000
            print("ok", flush=True)
        elif words[0] == "expect":
            state.expect(int(words[1]), [int(w) for w in words[2:]])
            print("ok", flush=True)
        elif words[0] == "count":
            print(f"count {state.delivered}", flush=True)
        elif more and words[0] in more:
            print(more[words[0]](words), flush=True)


async def serve_sink(port: int, chunking: bool = True) -> None:
    """The sink's process: SMTP on ``port`` (CHUNKING offered when ``chunking``); the control
    lines of :func:`control` on stdin, answers on stdout."""
    state = SinkState()
    state.chunking = chunking
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SinkSession(state), "127.0.0.1", port, backlog=1024, reuse_address=True
    )
    async with server:
        await control(state)


def run_sink(port: int, chunking: bool = True) -> None:
    """Serve the sink on ``port`` until stdin closes or SIGTERM arrives."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    asyncio.run(serve_sink(port, chunking))


class Interrupted(Exception):
    """The worker being measured exited before the sink had everything."""


@dataclass
class Drained:
    first: float
    last: float
    count: int
    marks: dict[int, float]
    started: float = 0.0


class Sink:
    """The asyncio sink in its own process, driven over its stdin and stdout."""

    name = "asyncio sink"

    def __init__(self, port: int, chunking: bool = True) -> None:
        self.port = port
        self.chunking = chunking
        if not chunking:
            self.name = "asyncio sink, no CHUNKING"
        options = [] if chunking else ["--no-chunking"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.support.latency_sink", str(port), *options],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if self.lines.get(timeout=30) != "ready":
            raise SystemExit("the sink did not start")

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.strip())
        self.lines.put("eof")

    def _ask(self, line: str) -> str:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self.lines.get(timeout=30)

    def set(self, latency_ms: float, data_ms: float) -> None:
        self._ask(f"set {latency_ms} {data_ms}")

    def expect(self, count: int, marks: tuple[int, ...] = ()) -> None:
        while not self.lines.empty():
            self.lines.get_nowait()
        self._ask(" ".join(["expect", str(count), *map(str, marks)]))

    def count(self) -> int:
        return int(self._ask("count").split()[1])

    def wait(self, timeout: float, alive: subprocess.Popen | None = None) -> Drained:
        """Until the expected count is reached; raises SystemExit on ``timeout`` or when
        ``alive`` exits."""
        deadline = time.monotonic() + timeout
        marks: dict[int, float] = {}
        while True:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                if alive is not None and alive.poll() is not None:
                    raise Interrupted(f"{alive.args} exited with {alive.returncode}") from None
                if time.monotonic() > deadline:
                    got = self.count()
                    raise SystemExit(f"the sink got {got} deliveries in {timeout} s") from None
                continue
            words = line.split()
            if words[0] == "mark":
                marks[int(words[1])] = float(words[2])
            elif words[0] == "done":
                return Drained(float(words[1]), float(words[2]), int(words[3]), marks)

    def stop(self) -> None:
        self.process.stdin.close()
        self.process.terminate()
        self.process.wait()
        self.reader.join()
        self.process.stdout.close()


class PostfixSink(Sink):
    """Postfix's ``smtp-sink`` (replies at once), counting the messages it reports with ``-c``:
    one recipient per message only."""

    name = "Postfix smtp-sink"

    def __init__(self, port: int, sessions: int = SMTP_SINK_SESSIONS) -> None:
        self.port = port
        self.sessions = sessions
        if sessions != SMTP_SINK_SESSIONS:
            self.name = f"Postfix smtp-sink -m {sessions}"
        # smtp-sink drops privileges and insists on being told to whom when started as root.
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        # -m: smtp-sink serves 256 sessions at once by default and leaves the rest unanswered
        # in the listen queue; a worker of several processes opens more than that. A smaller
        # -m stands for a server with a process limit (Postfix's smtpd: 100).
        self.process = subprocess.Popen(
            [
                f"{SBIN}/smtp-sink",
                "-c",
                "-m",
                str(sessions),
                *user,
                f"127.0.0.1:{port}",
                "1024",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.lock = threading.Lock()
        self.seen = 0
        self.base = 0
        self.expected = 0
        self.first: float | None = None
        self.marks: list[int] = []
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        wait_port(port)

    def _read(self) -> None:
        pattern = re.compile(rb"mesg=(\d+)")
        pending = b""
        while chunk := os.read(self.process.stdout.fileno(), 65536):
            now = time.monotonic()
            pending += chunk
            *records, pending = pending.split(b"\r")
            counts = [int(m.group(1)) for r in records if (m := pattern.search(r))]
            if counts:
                self._seen(max(counts), now)

    def _seen(self, total: int, now: float) -> None:
        with self.lock:
            before, self.seen = self.seen - self.base, total
            delivered = total - self.base
            if delivered > before and self.first is None:
                self.first = now
            while self.marks and self.marks[0] <= delivered:
                self.lines.put(f"mark {self.marks.pop(0)} {now:.6f}")
            if before < self.expected <= delivered:
                self.lines.put(f"done {self.first:.6f} {now:.6f} {delivered}")

    def set(self, latency_ms: float, data_ms: float) -> None:
        assert latency_ms == 0 and data_ms == 0

    def expect(self, count: int, marks: tuple[int, ...] = ()) -> None:
        with self.lock:
            while not self.lines.empty():
                self.lines.get_nowait()
            self.base, self.expected, self.first, self.marks = self.seen, count, None, sorted(marks)

    def count(self) -> int:
        with self.lock:
            return self.seen - self.base

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()
        self.reader.join()
        self.process.stdout.close()


if __name__ == "__main__":
    run_sink(int(sys.argv[1]), chunking="--no-chunking" not in sys.argv[2:])
