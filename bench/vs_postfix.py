"""Layang against Postfix: one `layang worker` and a private Postfix relay the same messages to
the same local upstream, in the same run, case after case; the ratios are paired per repetition.

    python bench/vs_postfix.py [--repeat 3] [--quick] [--cases 0ms,25ms,...] [--scale 1.0]
                               [--admin-url postgresql://user:password@127.0.0.1:5432/db]
                               [--zero-sink auto|smtp-sink|asyncio] [--queue-sizes 1000,10000,50000]

The upstream is an asyncio SMTP sink (this file, run with ``--serve-sink PORT``) whose every reply
leaves L ms after the command it answers arrived: pipelined commands do not add up, a stand-in
for a link's round trip that loopback lacks. It can also hold the reply to the end of DATA for
longer (a content scan). At 0 ms Postfix's own ``smtp-sink`` is used when installed (C, so that
the sink is not what limits either side). The sink counts a delivery per recipient of each
completed DATA and notes when the last one expected was answered.

Postfix: Debian's ``postfix`` package, installed here if missing (``apt-get``, non-interactive,
"No configuration": no system instance is set up or started). The instance is private: its own
config_directory, queue_directory and data_directory under a temp dir, smtpd on a free loopback
port for submission, ``relayhost`` the sink, default concurrency and everything else as shipped.
The messages are submitted over SMTP while a header check puts each on hold, then released with
``postsuper -H ALL`` (and ``postqueue -f``, which starts the deferred queue's scan instead of
waiting for ``queue_run_delay``); the drain is timed from the release to the sink's last delivery.

Layang: a throwaway PostgreSQL database made through ``--admin-url``; the same messages enqueued
through the domain's intake while no worker runs and held (due in the year 3000), then one
``layang worker`` started on the held queue and left to settle, the queue released (made due now,
with the NOTIFY an enqueue sends), and the drain timed from the release until the sink has them
all, as Postfix's is; then the worker is stopped. Whatever ``layang worker`` is (processes,
connections) is what is measured.

Cases (each: Layang's rate over Postfix's in the same repetition):

- ``0ms``: replies at once (``smtp-sink``);
- ``25ms``, ``100ms``: every reply 25 / 100 ms after its command;
- ``25ms+300``: 25 ms per reply, 300 ms more after the end of DATA;
- ``25ms-10rcpt``: 25 ms, 10 recipients per message, Postfix with XVERP (one copy each);
- ``dkim``: Layang only, DKIM-signed over unsigned at 0 ms, from first to last delivery;
- ``idle``: Layang only, an idle worker's CPU (process and children, from /proc) over 30 s.

Then the queue-size curve: Layang's rate with 1,000 / 10,000 / 50,000 messages queued, at 0 ms,
over the deliveries from the 200th to the 1,000th (the worker's start-up left out).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import queue
import re
import secrets
import shutil
import signal
import smtplib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit, urlunsplit

import peewee
import psycopg2

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, this file's folder comes first on the path: keep it off, so that no bench
# script's name can stand for a package the code imports.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.support.machine import free_port, wait_port  # noqa: E402
from bench.support.queue import HTML, TEXT  # noqa: E402

SENDER = "shop@sender.example"
SBIN = "/usr/sbin"
SMTP_SINK_SESSIONS = 4096
T = TypeVar("T")


# --- The sink ----------------------------------------------------------------------------------


class SinkState:
    """Settings and counters shared by the sink's sessions; ``out`` gets the control answers."""

    def __init__(self) -> None:
        self.latency = 0.0
        self.data_delay = 0.0
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

    def command(self, line: bytes, now: float) -> None:
        verb = line[:4].upper()
        if verb == b"EHLO":
            self.reply(
                b"250-sink.bench\r\n250-PIPELINING\r\n250-SIZE 104857600\r\n"
                b"250-ENHANCEDSTATUSCODES\r\n250 8BITMIME\r\n",
                now,
            )
        elif verb == b"HELO":
            self.reply(b"250 sink.bench\r\n", now)
        elif verb == b"MAIL":
            self.recipients = 0
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
            self.recipients = 0
            self.reply(b"250 2.0.0 Ok\r\n", now)
        elif verb == b"NOOP":
            self.reply(b"250 2.0.0 Ok\r\n", now)
        elif verb == b"QUIT":
            self.reply(b"221 2.0.0 Bye\r\n", now, close=True)
        else:
            self.reply(b"502 5.5.2 Error: command not recognized\r\n", now)


async def serve_sink(port: int) -> None:
    """The sink's process: SMTP on ``port``; control lines on stdin (``set LATENCY_MS DATA_MS``,
    ``expect COUNT [MARK...]``, ``count``), answers on stdout."""
    state = SinkState()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SinkSession(state), "127.0.0.1", port, backlog=1024, reuse_address=True
    )
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    print("ready", flush=True)
    async with server:
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


class Interrupted(Exception):
    """The worker being measured exited before the sink had everything."""


# --- Driving the sinks -------------------------------------------------------------------------


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

    def __init__(self, port: int) -> None:
        self.port = port
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve-sink", str(port)],
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

    def __init__(self, port: int) -> None:
        self.port = port
        # smtp-sink drops privileges and insists on being told to whom when started as root.
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        # -m: smtp-sink serves 256 sessions at once by default and leaves the rest unanswered
        # in the listen queue; a worker of several processes opens more than that.
        self.process = subprocess.Popen(
            [
                f"{SBIN}/smtp-sink",
                "-c",
                "-m",
                str(SMTP_SINK_SESSIONS),
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


# --- Postfix -----------------------------------------------------------------------------------


def ensure_postfix() -> None:
    """Install Debian's postfix package when missing, answering "No configuration": no main.cf
    in /etc/postfix, so the package sets up and starts no system instance."""
    if Path(f"{SBIN}/postfix").exists() and Path(f"{SBIN}/smtp-sink").exists():
        return
    if os.geteuid() != 0:
        raise SystemExit("Postfix is not installed; as root: apt-get install postfix")
    print("installing Debian's postfix package (No configuration)", flush=True)
    subprocess.run(
        ["debconf-set-selections"],
        input="postfix postfix/main_mailer_type select No configuration\n",
        text=True,
        check=True,
    )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-q", "-o", "DPkg::Lock::Timeout=600"]
    subprocess.run([*apt, "update"], env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run(
        [*apt, "install", "-y", "--no-install-recommends", "postfix"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )


MAIN_CF = """\
compatibility_level = 3.6
queue_directory = {base}/spool
data_directory = {base}/data
maillog_file = {base}/maillog
maillog_file_prefixes = {base}
myhostname = postfix.bench.local
mydomain = bench.local
myorigin = $myhostname
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_relay_restrictions = permit_mynetworks, reject
smtpd_peername_lookup = no
# Submission may ask for one copy per recipient (the sender address varies with each).
smtpd_authorized_verp_clients = 127.0.0.0/8
relayhost = [127.0.0.1]:{relay_port}
smtp_tls_security_level = none
smtputf8_enable = no
biff = no
# Everything submitted waits in the hold queue until released.
header_checks = static:HOLD
"""


class PrivatePostfix:
    """A Postfix instance of its own under ``base``: started, fed, drained, stopped; nothing
    of /etc/postfix or /var/spool/postfix is written."""

    def __init__(self, base: Path, relay_port: int) -> None:
        self.base = base
        self.etc = base / "etc"
        self.spool = base / "spool"
        self.smtpd_port = free_port()
        self.relay_port = relay_port
        self.running = False

    def run(self, *command: str) -> None:
        done = subprocess.run(
            [f"{SBIN}/{command[0]}", "-c", str(self.etc), *command[1:]],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            log = self.base / "maillog"
            raise SystemExit(f"{' '.join(command)} failed: {done.stderr.strip()} (see {log})")

    def start(self) -> None:
        ensure_postfix()
        for path in (self.etc, self.spool, self.base / "data"):
            path.mkdir(parents=True)
        shutil.chown(self.base / "data", "postfix")
        # The daemons run as the postfix user: the way down to the queue must be open.
        for path in (self.base, *self.base.parents):
            if path == Path("/"):
                break
            path.chmod(path.stat().st_mode | 0o755)
        (self.etc / "main.cf").write_text(
            MAIN_CF.format(base=self.base, relay_port=self.relay_port)
        )
        master = Path("/etc/postfix/master.cf").read_text()
        # Submission on a free loopback port instead of port 25; no chroot (nothing is copied in).
        master = re.sub(
            r"(?m)^smtp\s+inet\s.*$",
            f"127.0.0.1:{self.smtpd_port} inet n - n - - smtpd",
            master,
        )
        (self.etc / "master.cf").write_text(master)
        self.run("postconf", "-F", "*/*/chroot = n")
        self.run("postfix", "start")
        self.running = True
        wait_port(self.smtpd_port)

    def stop(self) -> None:
        if self.running:
            self.running = False
            subprocess.run(
                [f"{SBIN}/postfix", "-c", str(self.etc), "stop"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def files(self, *queues: str) -> int:
        return sum(len(files) for name in queues for _, _, files in os.walk(self.spool / name))

    def submit(self, messages: list[tuple[list[str], bytes]], xverp: bool) -> None:
        """Submit over SMTP (each message held), and wait until all are in the hold queue."""
        held = self.files("hold")
        options = ["XVERP"] if xverp else []
        with smtplib.SMTP("127.0.0.1", self.smtpd_port, local_hostname="bench.local") as smtp:
            for recipients, data in messages:
                smtp.sendmail(SENDER, recipients, data, mail_options=options)
        deadline = time.monotonic() + 60
        while self.files("hold") < held + len(messages):
            if time.monotonic() > deadline:
                raise SystemExit("Postfix did not hold every message submitted")
            time.sleep(0.05)

    def release(self) -> None:
        self.run("postsuper", "-H", "ALL")
        self.run("postqueue", "-f")

    def wait_empty(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while self.files("incoming", "active", "deferred", "hold", "maildrop"):
            if time.monotonic() > deadline:
                raise SystemExit(f"Postfix's queue did not empty: see {self.base}/maillog")
            time.sleep(0.05)


# --- Layang ------------------------------------------------------------------------------------


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


def admin(url: str, sql: str) -> None:
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    try:
        with conn.cursor() as cursor:
            cursor.execute(sql)
    finally:
        conn.close()


def process_tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of ``pid``, its children reaped, and its live descendants."""
    parents: dict[int, int] = {}
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
            stats[int(entry.name)] = fields
    tree, grew = {pid}, True
    while grew:
        more = {child for child, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    ticks = 0
    for member in tree & stats.keys():
        fields = stats[member]
        ticks += int(fields[11]) + int(fields[12])
        if member == pid:
            ticks += int(fields[13]) + int(fields[14])
    return ticks / os.sysconf("SC_CLK_TCK")


HELD_UNTIL_MS = 32503680000000  # the year 3000: a queue held until released


def settle(worker: subprocess.Popen, timeout: float = 30) -> None:
    """Wait until ``worker`` has started and gone idle (under 20 ms of CPU in half a second)."""
    deadline = time.monotonic() + timeout
    time.sleep(1)
    before = process_tree_cpu(worker.pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        if worker.poll() is not None:
            raise Interrupted(f"the worker exited with {worker.returncode}")
        now = process_tree_cpu(worker.pid)
        if now - before < 0.02:
            return
        before = now
    raise SystemExit("the worker did not settle")


class Layang:
    """A throwaway PostgreSQL database, a queue filled through the domain's intake, and
    ``layang worker`` processes started on it."""

    def __init__(self, admin_url: str, base: Path, relay_port: int) -> None:
        self.admin_url = admin_url
        self.name = f"layang_bench_{secrets.token_hex(4)}"
        admin(admin_url, f'CREATE DATABASE "{self.name}"')
        base.mkdir(parents=True, exist_ok=True)
        self.base = base
        self.relay_port = relay_port
        env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
        env.update(
            LAYANG_DATA_DIR=str(base),
            LAYANG_DATABASE_URL=with_database(admin_url, self.name),
            LAYANG_LOG_LEVEL="WARNING",
            LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
        )
        self.env = env
        from layang.config import Config
        from layang.db import open_database
        from layang.migrations import upgrade

        self.config = Config.from_env(env, dotenv=False)
        open_database(self.config.database_url)
        upgrade()
        self.runs = 0
        self.startup = 0.0

    def close(self) -> None:
        from layang.db import database

        database.close()
        admin(self.admin_url, f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def reset(self) -> None:
        from layang.db import database

        tables = [
            row[0]
            for row in database.execute_sql(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchall()
            if row[0] != "schema_version"
        ]
        database.execute_sql(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE")

    def fill(self, messages: list, signed: bool = False) -> None:
        """Empty the queue, then queue ``messages`` (OutgoingMessage) from one account, whose
        domain signs with DKIM when ``signed``."""
        from layang.db import database
        from layang.domain import accounts
        from layang.domain.intake import TransmissionRequest, accept_transmission
        from layang.domain.sending_domains import create_domain
        from layang.models import DkimKey, SendingDomain

        self.reset()
        account = accounts.create_account(f"bench{secrets.token_hex(4)}", live=True)
        if signed:
            create_domain(account, "sender.example", None, self.config)
            SendingDomain.update(status="verified").execute()
            DkimKey.update(status="active").execute()
        for start in range(0, len(messages), 1000):
            with database.atomic():
                for message in messages[start : start + 1000]:
                    accept_transmission(account, TransmissionRequest(message), self.config)

    def start_worker(self) -> subprocess.Popen:
        self.runs += 1
        command = Path(sys.executable).with_name("layang")
        program = [str(command)] if command.exists() else [sys.executable, "-m", "layang"]
        with open(self.base / f"worker-{self.runs}.log", "wb") as log:
            return subprocess.Popen(
                [*program, "worker"], cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    @staticmethod
    def stop_worker(worker: subprocess.Popen) -> None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()

    def drain(self, sink: Sink, expected: int, marks: tuple[int, ...] = ()) -> Drained:
        """Hold the filled queue, start one worker on it and let it settle, then release the
        queue (as ``postsuper -H ALL`` releases Postfix's) and wait for the last delivery;
        ``started`` of the answer is the release."""
        from layang.db import database
        from layang.mail.outbox import QUEUED_CHANNEL

        database.execute_sql(
            'UPDATE "recipient" SET "next_attempt_at" = %s WHERE "next_attempt_at" IS NOT NULL',
            (HELD_UNTIL_MS,),
        )
        sink.expect(expected, marks)
        worker = self.start_worker()
        try:
            settle(worker)
            started = time.monotonic()
            database.execute_sql(
                'UPDATE "recipient" SET "next_attempt_at" = %s WHERE "next_attempt_at" = %s',
                (int(time.time() * 1000), HELD_UNTIL_MS),
            )
            database.execute_sql(f"NOTIFY {QUEUED_CHANNEL}")
            drained = sink.wait(3600, worker)
        finally:
            self.stop_worker(worker)
        self.startup = drained.first - started
        drained.started = started
        return drained

    def idle_cpu(self, seconds: float) -> float:
        """Milliseconds of CPU per second of an idle worker (empty queue), after 5 s to settle."""
        self.reset()
        worker = self.start_worker()
        try:
            time.sleep(5)
            if worker.poll() is not None:
                raise Interrupted(f"the worker exited with {worker.returncode}")
            before, started = process_tree_cpu(worker.pid), time.monotonic()
            time.sleep(seconds)
            used = process_tree_cpu(worker.pid) - before
            return used * 1000 / (time.monotonic() - started)
        finally:
            self.stop_worker(worker)


# --- Cases -------------------------------------------------------------------------------------


@dataclass
class Case:
    name: str
    title: str
    latency_ms: float
    data_ms: float
    messages: int
    recipients: int = 1


CASES = [
    Case("0ms", "0 ms", 0, 0, 10000),
    Case("25ms", "25 ms per reply", 25, 0, 3000),
    Case("100ms", "100 ms per reply", 100, 0, 1000),
    Case("25ms+300", "25 ms + 300 ms after DATA", 25, 300, 1000),
    Case("25ms-10rcpt", "25 ms, 10 recipients/message (Postfix XVERP)", 25, 0, 300, 10),
]


def outgoing(n: int, recipients: int):
    from layang.mail.message import Mailbox, OutgoingMessage

    return OutgoingMessage(
        sender=Mailbox(SENDER, "Shop"),
        subject=f"layang {n}",
        to=tuple(Mailbox(f"r{n}.{k}@rcpt.example") for k in range(recipients)),
        text=TEXT,
        html=HTML,
        date_ms=1_700_000_000_000,
    )


def composed(messages: list) -> list[tuple[list[str], bytes]]:
    from layang.mail.compose import compose_message

    return [
        (
            [box.email for box in message.to],
            compose_message(message, f"<postfix{n}@sender.example>"),
        )
        for n, message in enumerate(messages)
    ]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a tenth of the messages, one repetition, a short curve",
    )
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply every case's message count"
    )
    parser.add_argument("--cases", default="0ms,25ms,100ms,25ms+300,25ms-10rcpt,dkim,idle")
    parser.add_argument("--queue-sizes", default="1000,10000,50000", help="empty: no curve")
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument("--zero-sink", choices=("auto", "smtp-sink", "asyncio"), default="auto")
    parser.add_argument(
        "--admin-url",
        default="postgresql://layang_ci:layang_ci@127.0.0.1:5432/layang_ci",
        help="a role that may create databases; a throwaway database is made and dropped",
    )
    parser.add_argument("--serve-sink", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sink:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        asyncio.run(serve_sink(args.serve_sink))
        return
    if args.quick:
        args.scale, args.repeat = args.scale / 10, 1
        if args.queue_sizes == parser.get_default("queue_sizes"):
            args.queue_sizes = "1000,5000"
        args.idle_seconds = min(args.idle_seconds, 10)
    chosen = args.cases.split(",")
    unknown = set(chosen) - {c.name for c in CASES} - {"dkim", "idle"}
    if unknown:
        raise SystemExit(f"--cases: unknown {', '.join(sorted(unknown))}")
    cases = [c for c in CASES if c.name in chosen]
    sizes = [int(n) for n in args.queue_sizes.split(",") if n]
    ensure_postfix()

    base = Path(tempfile.mkdtemp(prefix="layang-vs-postfix-"))
    sink_port, zero_port = free_port(), free_port()
    use_smtp_sink = args.zero_sink == "smtp-sink" or (
        args.zero_sink == "auto" and Path(f"{SBIN}/smtp-sink").exists()
    )
    sink = Sink(sink_port)
    zero_sink = PostfixSink(zero_port) if use_smtp_sink else sink
    postfix = PrivatePostfix(base / "postfix", sink_port)
    postfix_zero = PrivatePostfix(base / "postfix-zero", zero_port) if use_smtp_sink else postfix
    layang: Layang | None = None
    results: dict[str, dict[str, list[float]]] = {}
    notes: list[str] = []
    idle: float | None = None
    curve: list[tuple[int, float]] = []
    completed = False
    try:
        for instance in {id(postfix): postfix, id(postfix_zero): postfix_zero}.values():
            instance.start()
        layang = Layang(args.admin_url, base / "layang", sink_port)
        zero_env = {**layang.env, "LAYANG_RELAY_URL": f"smtp://127.0.0.1:{zero_port}?tls=off"}
        sink_env = {**layang.env, "LAYANG_RELAY_URL": f"smtp://127.0.0.1:{sink_port}?tls=off"}

        def run_case(case: Case, rep: int) -> dict[str, float]:
            count = max(int(case.messages * args.scale), 10)
            messages = [outgoing(n, case.recipients) for n in range(count)]
            expected = count * case.recipients
            upstream = zero_sink if case.latency_ms == 0 and case.data_ms == 0 else sink
            instance = postfix_zero if upstream is zero_sink else postfix
            layang.env = zero_env if upstream is zero_sink else sink_env
            upstream.set(case.latency_ms, case.data_ms)
            timings = {"expected": float(expected)}
            order = ("postfix", "layang") if rep % 2 == 0 else ("layang", "postfix")
            for side in order:
                if side == "postfix":
                    instance.submit(composed(messages), xverp=case.recipients > 1)
                    upstream.expect(expected)
                    started = time.monotonic()
                    instance.release()
                    drained = upstream.wait(3600)
                    timings["postfix"] = drained.last - started
                    instance.wait_empty()
                else:
                    layang.fill(messages)
                    drained = layang.drain(upstream, expected)
                    timings["layang"] = drained.last - drained.started
                    timings["startup"] = drained.first - drained.started
                time.sleep(0.5)
                if (extra := upstream.count() - expected) > 0:
                    notes.append(f"{case.name} rep {rep + 1}: {side} delivered {extra} twice")
            return timings

        def run_dkim(count: int, rep: int) -> dict[bool, float]:
            layang.env = zero_env
            messages = [outgoing(n, 1) for n in range(count)]
            timings = {}
            for signed in (False, True) if rep % 2 == 0 else (True, False):
                layang.fill(messages, signed=signed)
                drained = layang.drain(zero_sink, count)
                # Both sides are Layang: the worker's start-up is left out of both.
                timings[signed] = drained.last - drained.first
            return timings

        def run_curve(size: int) -> float:
            layang.env = zero_env
            layang.fill([outgoing(n, 1) for n in range(size)])
            low, high = 200, min(1000, size)
            drained = layang.drain(zero_sink, high, (low, high))
            return (high - low) / (drained.marks[high] - drained.marks[low])

        print(
            f"Layang: one `layang worker`, PostgreSQL; Postfix {postfix_version()}, default "
            f"settings, relayhost the sink; {os.cpu_count()} cores; --repeat {args.repeat}; "
            f"0 ms sink: {zero_sink.name}, others: {sink.name}; database {layang.name}",
            flush=True,
        )
        for rep in range(args.repeat):
            for case in cases:
                timings = retrying(
                    f"{case.name} rep {rep + 1}",
                    lambda case=case, rep=rep: run_case(case, rep),
                    notes,
                    args.admin_url,
                )
                row = results.setdefault(case.name, {"postfix": [], "layang": [], "ratio": []})
                expected = timings["expected"]
                row["postfix"].append(expected / timings["postfix"])
                row["layang"].append(expected / timings["layang"])
                row["ratio"].append(timings["postfix"] / timings["layang"])
                print(
                    f"  rep {rep + 1} {case.title}: {expected:.0f} deliveries, Postfix "
                    f"{timings['postfix']:.2f} s, Layang {timings['layang']:.2f} s "
                    f"(first delivery {timings['startup']:.2f} s after the release), "
                    f"ratio {timings['postfix'] / timings['layang']:.3f}",
                    flush=True,
                )
            if "dkim" in chosen:
                count = max(int(3000 * args.scale), 10)
                timings = retrying(
                    f"dkim rep {rep + 1}",
                    lambda rep=rep, count=count: run_dkim(count, rep),
                    notes,
                    args.admin_url,
                )
                row = results.setdefault("dkim", {"unsigned": [], "signed": [], "ratio": []})
                row["unsigned"].append(count / timings[False])
                row["signed"].append(count / timings[True])
                row["ratio"].append(timings[False] / timings[True])
                print(
                    f"  rep {rep + 1} DKIM at 0 ms: {count} messages, unsigned "
                    f"{timings[False]:.2f} s, signed {timings[True]:.2f} s, "
                    f"ratio {timings[False] / timings[True]:.3f}",
                    flush=True,
                )
        if "idle" in chosen:
            layang.env = sink_env
            idle = retrying(
                "idle", lambda: layang.idle_cpu(args.idle_seconds), notes, args.admin_url
            )
            print(f"  idle worker: {idle:.2f} ms of CPU per second", flush=True)
        for size in sizes:
            curve.append(
                (
                    size,
                    retrying(
                        f"queue of {size}", lambda size=size: run_curve(size), notes, args.admin_url
                    ),
                )
            )
            print(f"  queue of {size}: {curve[-1][1]:.1f} msg/s", flush=True)
        completed = True
    finally:
        for instance in (postfix, postfix_zero):
            instance.stop()
        sink.stop()
        if zero_sink is not sink:
            zero_sink.stop()
        report(args, cases, results, idle, curve, notes)
        if layang is not None:
            layang.close()
        if completed:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"Logs (Postfix's maillog, the workers') kept in {base}")


def retrying(label: str, measure: Callable[[], T], notes: list[str], admin_url: str) -> T:
    """``measure()``, again (up to three times) when the database went away or the worker
    exited under it: the machine's PostgreSQL may be restarted by others meanwhile."""
    from layang.db import database

    for attempt in range(3):
        try:
            return measure()
        except (Interrupted, peewee.PeeweeException, psycopg2.Error) as error:
            if attempt == 2:
                raise
            notes.append(f"{label}: measured again after {type(error).__name__}: {error}")
            print(f"  {label}: {type(error).__name__}, waiting for the database", flush=True)
            with contextlib.suppress(peewee.PeeweeException, psycopg2.Error):
                database.close()
            wait_for_database(admin_url)
    raise AssertionError("unreachable")


def wait_for_database(url: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg2.connect(url).close()
            return
        except psycopg2.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def report(
    args: argparse.Namespace,
    cases: list[Case],
    results: dict[str, dict[str, list[float]]],
    idle: float | None,
    curve: list[tuple[int, float]],
    notes: list[str],
) -> None:
    """The table (whatever was measured, should a later part have failed)."""
    print()
    ratio = f"Layang / Postfix, median [min-max] of {args.repeat}"
    print(f"| case | Postfix msg/s | Layang msg/s | {ratio} |")
    print("|---|---|---|---|")
    for case in cases:
        if not (row := results.get(case.name)):
            continue
        print(
            f"| {case.title} | {statistics.median(row['postfix']):.1f} | "
            f"{statistics.median(row['layang']):.1f} | {spread(row['ratio'])} |"
        )
    if "dkim" in results:
        row = results["dkim"]
        print(
            f"| DKIM-signed / unsigned at 0 ms (Layang only) | unsigned "
            f"{statistics.median(row['unsigned']):.1f} | signed "
            f"{statistics.median(row['signed']):.1f} | {spread(row['ratio'])} |"
        )
    if idle is not None:
        print(f"| idle worker CPU over {args.idle_seconds:.0f} s | | {idle:.2f} ms/s | |")
    if curve:
        print()
        print("Queue-size curve (one worker, 0 ms, deliveries 200 to 1,000):")
        for size, rate in curve:
            print(f"  {size:>6} queued: {rate:8.1f} msg/s")
    for note in notes:
        print("note:", note)


def postfix_version() -> str:
    try:
        out = subprocess.run(
            [f"{SBIN}/postconf", "-d", "-h", "mail_version"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return out


if __name__ == "__main__":
    main()
