"""Inbound routing's rate against Postfix's, in one run, on the same messages.

1. Layang: one ``layang inbound`` process and one ``layang worker`` process; ``--count`` reply
   messages (text, HTML and a small attachment, ~6 KB) sent over ``--connections`` SMTP
   connections to a ``.localhost`` inbound domain whose route posts to a local HTTP endpoint.
   Measured: messages per second accepted (every 250 received) and delivered (from the first
   connection until the endpoint has them all: received, stored, parsed, checked, posted).
   SPF, DKIM and DMARC are checked against a local DNS server (dnslib) that answers at once.
2. Postfix (Debian's package, an instance of its own): the same messages over the same
   connections to its smtpd, delivered into a maildir (virtual delivery): messages per second
   until every file is in ``new/``.

    python bench/inbound.py [--count 1000] [--connections 4] [--database-url URL]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import smtplib
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from email.message import EmailMessage
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.support.http_counter import counted, serve_counter, start_counter  # noqa: E402
from bench.support.machine import free_port, wait_port  # noqa: E402
from bench.support.postfix import (  # noqa: E402
    INSTANCE_CF,
    SBIN,
    PrivatePostfix,
    ensure_postfix,
    postfix_version,
)

DOMAIN = "in.bench.localhost"
API_KEY_NAME = "bench"


def one_message(body: bytes) -> int:
    """What the route's endpoint counts of a POST: the one message it carries."""
    assert json.loads(body)["type"] == "layang.inbound"
    return 1


def messages(count: int) -> list[bytes]:
    found = []
    for n in range(count):
        message = EmailMessage()
        message["From"] = "Ana <ana@sender.example>"
        message["To"] = f"support+{n}@{DOMAIN}"
        message["Subject"] = f"Re: ticket {n}"
        message["Message-ID"] = f"<bench-{n}@sender.example>"
        message.set_content(
            f"Thanks, ticket {n} is solved.\n\nOn Sun, Nov 29, 2026 at 9:00 AM Shop "
            f"<support@{DOMAIN}> wrote:\n" + "> Did the reset work?\n" * 20
        )
        message.add_alternative(f"<p>Thanks, ticket {n} is solved.</p>" * 10, subtype="html")
        message.add_attachment(os.urandom(2048), maintype="image", subtype="png", filename="a.png")
        found.append(message.as_bytes(policy=message.policy.clone(linesep="\r\n")))
    return found


def send_all(port: int, data: list[bytes], connections: int) -> float:
    """Send every message over ``connections`` sessions; the seconds until the last 250."""
    shares = [data[i::connections] for i in range(connections)]

    def one(share: list[bytes]) -> None:
        with smtplib.SMTP("127.0.0.1", port, local_hostname="bench.sender.example") as smtp:
            for n, item in enumerate(share):
                to = re.search(rb"^To: (\S+)", item, re.M).group(1).decode()
                smtp.sendmail("ana@sender.example", [to], item)
                if n % 50 == 49:
                    smtp.rset()

    started = time.monotonic()
    with ThreadPoolExecutor(connections) as pool:
        list(pool.map(one, shares))
    return time.monotonic() - started


def layang_run(args: argparse.Namespace, data: list[bytes], tmp: Path) -> dict[str, float]:
    from dnslib.server import DNSServer

    from layang.config import Config
    from layang.db import open_database
    from layang.domain import accounts, inbound_routing
    from layang.migrations import upgrade
    from tests.support.dns_server import QuietLogger, Zone

    zone = Zone()
    zone.add_txt("sender.example", "v=spf1 ip4:127.0.0.1 -all")
    zone.add_txt("_dmarc.sender.example", "v=DMARC1; p=none")
    dns_port = free_port()
    dns = DNSServer(zone, address="127.0.0.1", port=dns_port, logger=QuietLogger())
    dns.start_thread()
    endpoint_port, inbound_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAYANG_")}
    env.update(
        LAYANG_DATA_DIR=str(tmp / "layang"),
        LAYANG_LOG_LEVEL="WARNING",
        LAYANG_SECRET_KEY="bench-secret-key-never-used-in-production",
        LAYANG_WEBHOOK_ALLOW_PRIVATE="true",
        LAYANG_INBOUND_BIND=f"127.0.0.1:{inbound_port}",
        LAYANG_DNS_RESOLVER=f"127.0.0.1:{dns_port}",
    )
    if args.database_url:
        env["LAYANG_DATABASE_URL"] = args.database_url
    config = Config.from_env(env, dotenv=False)
    open_database(config.database_url)
    upgrade()
    account = accounts.create_account(f"bench-{os.getpid()}-{time.time_ns()}", live=True)
    domain = f"{os.getpid()}.{DOMAIN}" if args.database_url else DOMAIN
    inbound_routing.create_domain(account, domain, config)
    inbound_routing.verify_domain(account, domain, config)
    inbound_routing.create_route(
        account, f"*@{domain}", "webhook", f"http://127.0.0.1:{endpoint_port}/", None, config
    )
    data = [item.replace(DOMAIN.encode(), domain.encode()) for item in data]
    endpoint = start_counter(__file__, "--serve-endpoint", endpoint_port)
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env, "cwd": ROOT}
    inbound = subprocess.Popen([sys.executable, "-m", "layang", "inbound"], **quiet)
    worker = subprocess.Popen([sys.executable, "-m", "layang", "worker"], **quiet)
    try:
        wait_port(inbound_port, 60)
        started = time.monotonic()
        accepted = send_all(inbound_port, data, args.connections)
        while counted(endpoint_port) < len(data):
            if time.monotonic() - started > 600:
                raise SystemExit("the endpoint did not get every message in 10 minutes")
            time.sleep(0.05)
        delivered = time.monotonic() - started
    finally:
        for process in (worker, inbound, endpoint):
            process.terminate()
            process.wait(30)
        dns.stop()
    return {"accepted": len(data) / accepted, "delivered": len(data) / delivered}


MAILDIR_CF = """\
virtual_mailbox_domains = {domain}
virtual_mailbox_base = {base}/mail
virtual_mailbox_maps = static:maildir/
virtual_uid_maps = static:{uid}
virtual_gid_maps = static:{gid}
virtual_minimum_uid = 1
"""


class MaildirPostfix(PrivatePostfix):
    """A private Postfix whose smtpd takes mail for ``DOMAIN`` into one maildir."""

    def start(self) -> None:
        ensure_postfix()
        # Owned by the postfix user, whose ids main.cf names for virtual delivery.
        (self.base / "mail").mkdir(parents=True)
        shutil.chown(self.base / "mail", "postfix", "postfix")
        super().start()

    def main_cf(self) -> str:
        mail = os.stat(self.base / "mail")
        return INSTANCE_CF.format(base=self.base) + MAILDIR_CF.format(
            base=self.base, domain=DOMAIN, uid=mail.st_uid, gid=mail.st_gid
        )

    def delivered(self) -> int:
        new = self.base / "mail" / "maildir" / "new"
        return len(os.listdir(new)) if new.exists() else 0


def postfix_run(args: argparse.Namespace, data: list[bytes], tmp: Path) -> dict[str, float]:
    postfix = MaildirPostfix(tmp / "postfix", 0)
    postfix.start()
    try:
        started = time.monotonic()
        accepted = send_all(postfix.smtpd_port, data, args.connections)
        while postfix.delivered() < len(data):
            if time.monotonic() - started > 600:
                raise SystemExit(f"Postfix did not deliver every message: see {postfix.base}")
            time.sleep(0.05)
        delivered = time.monotonic() - started
    finally:
        postfix.stop()
    return {"accepted": len(data) / accepted, "delivered": len(data) / delivered}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--database-url", default="")
    parser.add_argument("--serve-endpoint", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_endpoint is not None:
        serve_counter(args.serve_endpoint, one_message)
        return
    if not Path(f"{SBIN}/postfix").exists():
        ensure_postfix()
    data = messages(args.count)
    tmp = Path(tempfile.mkdtemp(prefix="layang-inbound-"))
    layang = layang_run(args, data, tmp)
    postfix = postfix_run(args, data, tmp)
    backend = "PostgreSQL" if args.database_url.startswith("postgres") else "SQLite"
    size = sum(map(len, data)) // len(data)
    print(
        f"{args.count} messages of {size} bytes over {args.connections} connections, "
        f"{os.cpu_count()} cores; Layang on {backend}, Postfix {postfix_version()}"
    )
    print(f"{'':36}{'accepted/s':>12}{'delivered/s':>13}")
    print(
        f"{'Layang (inbound + worker, posted)':36}{layang['accepted']:>12.1f}"
        f"{layang['delivered']:>13.1f}"
    )
    print(
        f"{'Postfix (smtpd, into a maildir)':36}{postfix['accepted']:>12.1f}"
        f"{postfix['delivered']:>13.1f}"
    )
    print(f"Layang delivers at {layang['delivered'] / postfix['delivered']:.2f}x Postfix's rate")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
