"""A private Postfix for a benchmark: Debian's package (installed when missing, with no system
instance), an instance of its own under a temp dir relaying to a sink, its messages held on
submission and released at once."""

from __future__ import annotations

import os
import re
import shutil
import smtplib
import subprocess
import time
from pathlib import Path

from bench.support.machine import free_port, wait_port
from bench.support.queue import SENDER

SBIN = "/usr/sbin"


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


INSTANCE_CF = """\
compatibility_level = 3.6
queue_directory = {base}/spool
data_directory = {base}/data
maillog_file = {base}/maillog
maillog_file_prefixes = {base}
myhostname = postfix.bench.local
mydestination =
local_recipient_maps =
alias_maps =
alias_database =
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
smtpd_peername_lookup = no
smtputf8_enable = no
biff = no
"""
"""main.cf of every private instance: its own queue and log under ``base``, loopback only, no
local delivery; ``main_cf`` adds what the instance is for."""

RELAY_CF = """\
mydomain = bench.local
myorigin = $myhostname
smtpd_relay_restrictions = permit_mynetworks, reject
# Submission may ask for one copy per recipient (the sender address varies with each).
smtpd_authorized_verp_clients = 127.0.0.0/8
relayhost = [127.0.0.1]:{relay_port}
smtp_tls_security_level = none
# Everything submitted waits in the hold queue until released.
header_checks = static:HOLD
"""


class PrivatePostfix:
    """A Postfix instance of its own under ``base``: started, fed, drained, stopped; nothing
    of /etc/postfix or /var/spool/postfix is written."""

    def __init__(self, base: Path, relay_port: int, sessions: int | None = None) -> None:
        self.base = base
        self.sessions = sessions
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
        (self.etc / "main.cf").write_text(self.main_cf())
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

    def main_cf(self) -> str:
        """The instance's main.cf: relay everything to ``relay_port``, held until released."""
        return (
            INSTANCE_CF.format(base=self.base)
            + RELAY_CF.format(relay_port=self.relay_port)
            + self.concurrency()
        )

    def concurrency(self) -> str:
        """main.cf lines for ``sessions``: at most that many sessions to the relayhost (every
        transport's per-destination limit, the smtp and relay transports' too), and processes
        enough to run them (100 by default)."""
        if self.sessions is None:
            return ""
        lines = [
            f"default_destination_concurrency_limit = {self.sessions}",
            f"smtp_destination_concurrency_limit = {self.sessions}",
            f"relay_destination_concurrency_limit = {self.sessions}",
        ]
        if self.sessions > 100:
            lines.append(f"default_process_limit = {self.sessions + 10}")
        return "\n".join(lines) + "\n"

    def master_pid(self) -> int:
        """The instance's master process: every daemon of it is its child."""
        return int((self.spool / "pid" / "master.pid").read_text().split()[0])

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


def composed(messages: list) -> list[tuple[list[str], bytes]]:
    from layang.mail.compose import compose_message

    return [
        (
            [box.email for box in message.to],
            compose_message(message, f"<postfix{n}@sender.example>"),
        )
        for n, message in enumerate(messages)
    ]


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
