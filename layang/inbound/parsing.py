"""Reading inbound mail in child processes, each message under a CPU-time limit.

Parsing is pure CPU work on bytes from anyone. In a thread it would still hold the
interpreter's lock and slow every session of the server (and, under ``layang run``, the API
beside it); it could also run for as long as the parser likes. So each message is read by one
of a few long-lived child processes (``python -m layang.inbound.parsing``): the child stops a
parse once it has used ``cpu_seconds`` of CPU, and a child that does not answer in time at all
is killed and replaced. Either way the message is ``Unrecognised`` (``NotAReport`` for a
DMARC report) and kept for inspection. A child's address space is limited to
``PARSE_MEMORY_BYTES``: a parse that wants more fails with ``MemoryError`` in the child, which
is only mail that could not be read.

Every kind of mail strangers send is read there: bounce and complaint reports
(``layang.inbound.reports``), DMARC aggregate reports (``layang.inbound.dmarc_reports``) and
mail for inbound routes (``layang.mail.received``).
The exchange is a frame each way over the child's stdin and stdout: the kind of reading and
the message's length, then its bytes, in; the pickled result out (parent and child are the
same code).
"""

from __future__ import annotations

import logging
import os
import pickle
import queue
import resource
import select
import signal
import struct
import subprocess
import sys
import time
from types import FrameType
from typing import BinaryIO

from layang.domain.dmarc import AggregateReport
from layang.domain.feedback import Report, Unrecognised
from layang.inbound.dmarc_reports import NotAReport
from layang.mail.received import ReceivedMail

log = logging.getLogger("layang.inbound")

PARSE_CPU_SECONDS = 5.0
"""CPU time one message's parse may use."""
PARSE_MEMORY_BYTES = 512 * 1024 * 1024
"""Address space one parsing child may use (the interpreter itself takes about 100 MB)."""
PARSERS = 2
"""Child processes reading mail at once; further messages wait for one."""
_FRAME = struct.Struct(">Q")
_REQUEST = struct.Struct(">cQ")
REPORT = b"r"
DMARC = b"d"
ROUTED = b"i"
DmarcResult = list[AggregateReport] | NotAReport
Read = Report | DmarcResult | ReceivedMail


def _unread(kind: bytes, reason: str) -> Read:
    """What a message of ``kind`` that could not be read is."""
    if kind == ROUTED:
        return ReceivedMail(problem=reason)
    return NotAReport(reason) if kind == DMARC else Unrecognised(reason)


class _CpuSpent(BaseException):
    """Raised in the child when a parse used its CPU time. A BaseException, so that the
    parser's own ``except Exception`` (odd mail is only unrecognised) does not swallow it."""


class _Child:
    """One parsing process, started on first use and again after it was killed."""

    def __init__(self, cpu_seconds: float, memory_bytes: int) -> None:
        self.cpu_seconds = cpu_seconds
        self.memory_bytes = memory_bytes
        self.process: subprocess.Popen[bytes] | None = None

    def read(self, data: bytes, kind: bytes) -> Read:
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(self.cpu_seconds), str(self.memory_bytes)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        process = self.process
        assert process.stdin is not None and process.stdout is not None
        # The wall-clock bound covers a child starved of CPU by others, and one stuck where
        # its CPU timer cannot interrupt it.
        deadline = time.monotonic() + 4 * self.cpu_seconds + 10
        try:
            process.stdin.write(_REQUEST.pack(kind, len(data)) + data)
            process.stdin.flush()
            size = _FRAME.unpack(_read_exactly(process.stdout, _FRAME.size, deadline))[0]
            found: Read = pickle.loads(  # noqa: S301 - our own child
                _read_exactly(process.stdout, size, deadline)
            )
            return found
        except TimeoutError:
            log.warning("inbound parser did not answer in time; replaced")
            self.stop()
            return _unread(kind, "parsing did not finish in time; kept unparsed")
        except (OSError, EOFError, pickle.UnpicklingError, struct.error) as error:
            log.warning("inbound parser failed (%s); replaced", type(error).__name__)
            self.stop()
            return _unread(kind, "the parser failed on it; kept unparsed")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def _read_exactly(stream: BinaryIO, size: int, deadline: float) -> bytes:
    """``size`` bytes from the pipe ``stream``; ``TimeoutError`` past ``deadline``,
    ``EOFError`` when the child is gone."""
    fd = stream.fileno()
    # poll, not select: select refuses descriptors past 1024, which a busy server reaches.
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    wanted = size
    while wanted:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poller.poll(remaining * 1000):
            raise TimeoutError
        chunk = os.read(fd, min(wanted, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        wanted -= len(chunk)
    return b"".join(chunks)


class ReportReader:
    """Reads messages into reports in ``processes`` child processes, each parse limited to
    ``cpu_seconds`` of CPU and each child to ``memory_bytes`` of address space. ``read`` and
    ``read_dmarc`` block (call them from a worker thread) and never raise; ``close`` stops the
    children."""

    def __init__(
        self,
        processes: int = PARSERS,
        cpu_seconds: float = PARSE_CPU_SECONDS,
        memory_bytes: int = PARSE_MEMORY_BYTES,
    ) -> None:
        self._idle: queue.SimpleQueue[_Child] = queue.SimpleQueue()
        self._children = [_Child(cpu_seconds, memory_bytes) for _ in range(processes)]
        for child in self._children:
            self._idle.put(child)

    def read(self, data: bytes) -> Report:
        """What ``data`` (a whole message as received) reports."""
        found = self._read(data, REPORT)
        assert not isinstance(found, (list, NotAReport))
        return found

    def read_dmarc(self, data: bytes) -> list[AggregateReport] | NotAReport:
        """The DMARC aggregate reports in ``data`` (a whole message as received), or why it
        holds none (``layang.inbound.dmarc_reports.read_aggregate_reports``)."""
        found = self._read(data, DMARC)
        assert isinstance(found, (list, NotAReport))
        return found

    def read_routed(self, data: bytes) -> ReceivedMail:
        """What the endpoint of a route is told of ``data`` (a whole message as received):
        :func:`layang.mail.received.read_received`."""
        found = self._read(data, ROUTED)
        assert isinstance(found, ReceivedMail)
        return found

    def _read(self, data: bytes, kind: bytes) -> Read:
        child = self._idle.get()
        try:
            return child.read(data, kind)
        finally:
            self._idle.put(child)

    def close(self) -> None:
        for child in self._children:
            child.stop()


def _serve(cpu_seconds: float, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """The child's loop: read a frame, parse it under the CPU limit, answer, until EOF."""
    from layang.inbound.dmarc_reports import read_aggregate_reports
    from layang.inbound.reports import read_report
    from layang.mail.received import read_received

    readers = {DMARC: read_aggregate_reports, ROUTED: read_received, REPORT: read_report}

    def spent(signum: int, frame: FrameType | None) -> None:
        raise _CpuSpent

    signal.signal(signal.SIGPROF, spent)
    while True:
        head = stdin.read(_REQUEST.size)
        if len(head) < _REQUEST.size:
            return
        kind, size = _REQUEST.unpack(head)
        data = stdin.read(size)
        found: Read
        try:
            signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
            try:
                found = readers.get(kind, read_report)(data)
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
        except _CpuSpent:
            found = _unread(kind, f"parsing took more than {cpu_seconds:g} s of CPU; kept unparsed")
        except MemoryError:
            found = _unread(kind, "parsing needed more memory than allowed; kept unparsed")
        del data
        answer = pickle.dumps(found)
        stdout.write(_FRAME.pack(len(answer)) + answer)
        stdout.flush()


if __name__ == "__main__":
    # Ctrl-C reaches the whole process group: the parent stops its children itself.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit = int(sys.argv[2])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _serve(float(sys.argv[1]), sys.stdin.buffer, sys.stdout.buffer)
