"""The Layang side of a benchmark: a throwaway PostgreSQL database, a queue filled through the
domain's intake and held, ``layang worker`` started on it, left to settle and timed from the
queue's release to the sink's last delivery."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2

from bench.support.latency_sink import Drained, Interrupted, Sink
from bench.support.machine import cpu_by_process, cpu_used, machine_cpu

ROOT = Path(__file__).resolve().parents[2]


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
        self.processes: int | None = None
        self.cpu = 0.0
        self.machine = 0.0

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
                [*program, "worker", *self.worker_options()],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def worker_options(self) -> list[str]:
        return [] if self.processes is None else ["--processes", str(self.processes)]

    def cpu_sample(self, worker: subprocess.Popen, sink: Sink) -> dict[int, float]:
        """CPU per process of this side and the sink: the worker's processes, the PostgreSQL
        backends serving its database (not the bench's own), and the sink's process."""
        from layang.db import database

        backends = [
            row[0]
            for row in database.execute_sql(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
        return cpu_by_process([worker.pid], [*backends, sink.process.pid])

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
        ``started`` of the answer is the release; ``self.cpu`` is then the CPU seconds of
        :meth:`cpu_sample` from the release to the last delivery, ``self.machine`` the whole
        machine's."""
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
            before, machine = self.cpu_sample(worker, sink), machine_cpu()
            started = time.monotonic()
            database.execute_sql(
                'UPDATE "recipient" SET "next_attempt_at" = %s WHERE "next_attempt_at" = %s',
                (int(time.time() * 1000), HELD_UNTIL_MS),
            )
            database.execute_sql(f"NOTIFY {QUEUED_CHANNEL}")
            drained = sink.wait(3600, worker)
            self.cpu = cpu_used(before, self.cpu_sample(worker, sink))
            self.machine = machine_cpu() - machine
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
