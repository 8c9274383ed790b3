"""Direct to MX: one `layang worker` with ``LAYANG_RELAY_URL=mx:`` against a private Postfix
delivering the same messages to the same recipients' MX hosts, in the same run.

    python bench/mx.py [--repeat 1] [--quick] [--messages 20000] [--domains 200] [--sites 20]
                       [--latency-ms 25] [--limit 10] [--throttle-seconds 20] [--no-curve]
                       [--admin-url postgresql://user:password@127.0.0.1:5432/db]

A simulated internet on this machine: ``--sites`` MX hosts, each its own loopback address
(127.0.0.2, 127.0.0.3 …) on one shared port, each an asyncio sink
(``bench/support/latency_sink.py``'s: every reply ``--latency-ms`` after its command) counting
the sessions open on it at once and its deliveries per second; ``--domains`` recipient domains
spread evenly over the sites, named in a dnslib DNS server (``tests/support/dns_server.py``'s
zone) with one MX record each.

Layang: ``LAYANG_RELAY_URL=mx:``, ``LAYANG_DNS_RESOLVER`` the DNS server, ``LAYANG_MX_PORT`` the
port, and a shaping file (``LAYANG_SHAPING_FILE``) giving every site ``--limit`` sessions; the
queue filled and held while no worker runs, one ``layang worker`` started on it and left to
settle, then the queue released and timed to the last delivery (as vs_postfix.py's).
Postfix: a private instance (as vs_postfix.py's), ``transport_maps`` naming each
domain's MX address (``smtp:[127.0.0.x]:port``), default per-destination concurrency (20 per
site, the Postfix default, where Layang has ``--limit``), timed from ``postsuper -H ALL``.

Then the drain curve: Layang alone, the same messages, and when half of them are delivered one
site starts answering every MAIL with "421 4.7.28 … rate limited" (and closing) for
``--throttle-seconds``; the deliveries per second of that site and of all the others are
printed, and the others' rate before and while the site throttles.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

from bench.support.latency_sink import Sink, SinkSession, SinkState, control  # noqa: E402
from bench.support.layang_run import Layang  # noqa: E402
from bench.support.postfix import (  # noqa: E402
    PrivatePostfix,
    composed,
    ensure_postfix,
    postfix_version,
)
from bench.support.queue import HTML, SENDER, TEXT  # noqa: E402
from bench.support.repetitions import retrying, spread  # noqa: E402

SLOW_DOWN = (
    b"421 4.7.28 Our system has detected an unusual rate of unsolicited mail originating "
    b"from your IP address. To protect our users from spam, mail sent from your IP address "
    b"has been temporarily rate limited.\r\n"
)


# --- The sites (in the sink's own process) -----------------------------------------------------


class Totals(SinkState):
    """Every site's deliveries together (``expect``, ``mark``, ``done`` as the latency sink's),
    and the throttle armed to start when ``throttle_at`` deliveries are in."""

    def __init__(self) -> None:
        super().__init__()
        self.sites: list[Site] = []
        self.t0 = time.monotonic()
        self.throttle_at: int | None = None
        self.throttle_site = 0
        self.throttle_seconds = 0.0
        self.throttled_at: float | None = None

    def expect(self, count: int, marks: list[int]) -> None:
        super().expect(count, marks)
        # (an armed throttle stays armed: the worker's drain says ``expect`` again)
        self.t0, self.throttled_at = time.monotonic(), None
        for site in self.sites:
            site.reset()

    def count(self, recipients: int, now: float) -> None:
        super().count(recipients, now)
        if self.throttle_at is not None and self.delivered >= self.throttle_at:
            self.throttle_at, self.throttled_at = None, now
            self.sites[self.throttle_site].throttled_until = now + self.throttle_seconds

    def stats(self) -> dict:
        return {
            "t0": self.t0,
            "throttled_at": self.throttled_at,
            "sites": [site.stats() for site in self.sites],
        }


class Site:
    """One MX host's counters: sessions open now and at most, deliveries per second since
    ``expect`` (``buckets``), MAIL commands refused with 421."""

    def __init__(self, host: str, totals: Totals) -> None:
        self.host = host
        self.totals = totals
        self.open = 0
        self.throttled_until = 0.0
        self.reset()

    def reset(self) -> None:
        self.peak = self.open
        self.sessions = 0
        self.delivered = 0
        self.refused = 0
        self.buckets: collections.Counter[int] = collections.Counter()
        self.throttled_until = 0.0

    @property
    def latency(self) -> float:
        return self.totals.latency

    @property
    def data_delay(self) -> float:
        return self.totals.data_delay

    @property
    def chunking(self) -> bool:
        return self.totals.chunking

    def count(self, recipients: int, now: float) -> None:
        self.delivered += recipients
        self.buckets[int(now - self.totals.t0)] += recipients
        self.totals.count(recipients, now)

    def stats(self) -> dict:
        return {
            "host": self.host,
            "peak": self.peak,
            "sessions": self.sessions,
            "delivered": self.delivered,
            "refused": self.refused,
            "buckets": dict(self.buckets),
        }


class SiteSession(SinkSession):
    """The latency sink's session, counted on its site; while the site throttles, MAIL gets 421
    and the session is closed."""

    state: Site  # type: ignore[assignment]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        site = self.state
        site.open += 1
        site.sessions += 1
        site.peak = max(site.peak, site.open)
        super().connection_made(transport)

    def connection_lost(self, error: Exception | None) -> None:
        self.state.open -= 1
        super().connection_lost(error)

    ending = False

    def command(self, line: bytes, now: float) -> None:
        if self.ending:  # pipelined after the 421: the server has stopped listening
            return
        if line[:4].upper() == b"MAIL" and now < self.state.throttled_until:
            self.state.refused += 1
            self.ending = True
            self.reply(SLOW_DOWN, now, close=True)
            return
        super().command(line, now)


async def serve_sites(port: int, hosts: list[str]) -> None:
    """The sites' process: one server per address in ``hosts`` on ``port``; control lines on
    stdin (the latency sink's ``set``, ``expect``, ``count``; ``throttle SITE AT SECONDS``,
    ``stats``), answers on stdout."""
    totals = Totals()
    loop = asyncio.get_running_loop()
    servers = []
    for host in hosts:
        site = Site(host, totals)
        totals.sites.append(site)
        servers.append(
            await loop.create_server(
                lambda site=site: SiteSession(site), host, port, backlog=1024, reuse_address=True
            )
        )

    def throttle(words: list[str]) -> str:
        totals.throttle_site, totals.throttle_at = int(words[1]), int(words[2])
        totals.throttle_seconds = float(words[3])
        return "ok"

    await control(
        totals,
        {"throttle": throttle, "stats": lambda _: "stats " + json.dumps(totals.stats())},
    )
    for server in servers:
        server.close()


class Sites(Sink):
    """The sites' process, driven over its stdin and stdout like the latency sink."""

    name = "asyncio sinks, one per site"

    def __init__(self, port: int, hosts: list[str]) -> None:
        self.port = port
        self.hosts = hosts
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--serve-sites", str(port), ",".join(hosts)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if self.lines.get(timeout=30) != "ready":
            raise SystemExit("the sites did not start")

    def throttle(self, site: int, at: int, seconds: float) -> None:
        self._ask(f"throttle {site} {at} {seconds}")

    def stats(self) -> dict:
        while not self.lines.empty():
            self.lines.get_nowait()
        answer = self._ask("stats")
        return json.loads(answer.split(" ", 1)[1])


# --- The internet: DNS, addresses, shaping -----------------------------------------------------


def shared_port(hosts: list[str]) -> int:
    """A port free on every address of ``hosts``."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((hosts[0], 0))
            port = probe.getsockname()[1]
        try:
            for host in hosts[1:]:
                with socket.socket() as other:
                    other.bind((host, port))
        except OSError:
            continue
        return port
    raise SystemExit("no port free on every site's address")


def site_host(site: int) -> str:
    return f"mx{site:02d}.sites.example"


def domain_name(domain: int) -> str:
    return f"d{domain:03d}.example"


def start_dns(domains: int, sites: int, addresses: list[str]):
    """A dnslib server (tests/support/dns_server.py's zone) on a free port: each domain's one MX
    host (domain i on site i mod sites), each host's A record; long TTLs."""
    from dnslib.server import DNSServer

    from tests.support.dns_server import QuietLogger, Zone, _free_port

    zone = Zone()
    for site in range(sites):
        zone.add_a(site_host(site), addresses[site], ttl=3600)
    for domain in range(domains):
        zone.add_mx(domain_name(domain), 10, site_host(domain % sites))
        zone.set_ttl(domain_name(domain), "MX", 3600)
    port = _free_port()
    server = DNSServer(zone, address="127.0.0.1", port=port, logger=QuietLogger())
    server.start_thread()
    return server, f"127.0.0.1:{port}"


def shaping_file(path: Path, sites: int, limit: int) -> Path:
    rules = [f"[default]\nconnections = {limit}\n"]
    for site in range(sites):
        rules.append(f'[site."{site_host(site)}"]\nconnections = {limit}\n')
    path.write_text("\n".join(rules))
    return path


class MxPostfix(PrivatePostfix):
    """The private Postfix (``bench/support/postfix.py``), with no relayhost: a transport_maps
    entry per domain."""

    def __init__(self, base: Path, transports: dict[str, str]) -> None:
        super().__init__(base, relay_port=0)
        self.transports = transports

    def start(self) -> None:
        super().start()
        table = self.etc / "transport"
        table.write_text("".join(f"{d} {t}\n" for d, t in self.transports.items()))
        table.chmod(0o644)
        self.run("postconf", "-e", "relayhost =", f"transport_maps = texthash:{table}")
        self.run("postfix", "reload")
        time.sleep(1)


class MxLayang(Layang):
    """The Layang side (``bench/support/layang_run.py``), its worker started with
    ``--processes`` when given, or profiled (bench/profile_worker.py: one process, cProfile in
    every thread, into ``profile``)."""

    processes: int | None = None
    profile: Path | None = None

    def start_worker(self) -> subprocess.Popen:
        if self.processes is None and self.profile is None:
            return super().start_worker()
        self.runs += 1
        if self.profile is not None:
            program = [sys.executable, str(ROOT / "bench" / "profile_worker.py")]
            program += ["--run-worker", str(self.profile)]
        else:
            program = [sys.executable, "-m", "layang", "worker", "--processes"]
            program.append(str(self.processes))
        with open(self.base / f"worker-{self.runs}.log", "wb") as log:
            return subprocess.Popen(
                program, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT
            )


# --- The messages --------------------------------------------------------------------------------


def outgoing(n: int, domains: int):
    from layang.mail.message import Mailbox, OutgoingMessage

    return OutgoingMessage(
        sender=Mailbox(SENDER, "Shop"),
        subject=f"layang {n}",
        to=(Mailbox(f"r{n}@{domain_name(n % domains)}"),),
        text=TEXT,
        html=HTML,
        date_ms=1_700_000_000_000,
    )


# --- Runs ----------------------------------------------------------------------------------------


def peaks(stats: dict) -> list[int]:
    return [site["peak"] for site in stats["sites"]]


def curve_table(stats: dict, site: int, step: int) -> list[str]:
    """Per-second deliveries of the throttled site and of the others (rows of ``step`` s)."""
    buckets = [
        collections.Counter({int(k): v for k, v in s["buckets"].items()}) for s in stats["sites"]
    ]
    last = max((max(b) for b in buckets if b), default=0)
    throttled_at = stats["throttled_at"]
    start = None if throttled_at is None else throttled_at - stats["t0"]
    lines = ["  second | throttled site | other sites (per s)"]
    for second in range(0, last + 1, step):
        mine = sum(buckets[site][s] for s in range(second, second + step)) / step
        others = (
            sum(
                b[s]
                for i, b in enumerate(buckets)
                if i != site
                for s in range(second, second + step)
            )
            / step
        )
        flag = ""
        if start is not None and second <= start < second + step:
            flag = "  <- 421s start"
        lines.append(f"  {second:6d} | {mine:14.1f} | {others:10.1f}{flag}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="2,000 messages, one repetition")
    parser.add_argument("--messages", type=int, default=20000)
    parser.add_argument("--domains", type=int, default=200)
    parser.add_argument("--sites", type=int, default=20)
    parser.add_argument("--latency-ms", type=float, default=25)
    parser.add_argument("--limit", type=int, default=10, help="Layang's sessions per site")
    parser.add_argument("--throttle-seconds", type=float, default=20)
    parser.add_argument("--no-curve", action="store_true", help="no drain curve")
    parser.add_argument("--curve-step", type=int, default=1, help="seconds per curve row")
    parser.add_argument(
        "--admin-url",
        default="postgresql://layang_ci:layang_ci@127.0.0.1:5432/layang_ci",
        help="a role that may create databases; a throwaway database is made and dropped",
    )
    parser.add_argument(
        "--processes", type=int, help="layang worker --processes (default: its own)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="Layang only, one process profiled in every thread (no Postfix, no curve)",
    )
    parser.add_argument("--serve-sites", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_sites:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        asyncio.run(serve_sites(int(args.serve_sites[0]), args.serve_sites[1].split(",")))
        return
    if args.quick:
        args.messages, args.repeat = min(args.messages, 2000), 1
        args.throttle_seconds = min(args.throttle_seconds, 10)
    if not 1 <= args.sites <= 250 or args.domains < args.sites:
        raise SystemExit("--sites must be 1 to 250, --domains at least --sites")
    ensure_postfix()

    addresses = [f"127.0.0.{site + 2}" for site in range(args.sites)]
    port = shared_port(addresses)
    base = Path(tempfile.mkdtemp(prefix="layang-mx-bench-"))
    dns, resolver = start_dns(args.domains, args.sites, addresses)
    sites = Sites(port, addresses)
    transports = {
        domain_name(d): f"smtp:[{addresses[d % args.sites]}]:{port}" for d in range(args.domains)
    }
    postfix = MxPostfix(base / "postfix", transports)
    layang: Layang | None = None
    notes: list[str] = []
    rows: dict[str, list[float]] = {"postfix": [], "layang": [], "ratio": []}
    peak_layang: list[int] = []
    peak_postfix: list[int] = []
    completed = False
    n = args.messages
    try:
        postfix.start()
        layang = MxLayang(args.admin_url, base / "layang", 0)
        layang.processes = args.processes
        layang.env.update(
            LAYANG_RELAY_URL="mx:",
            LAYANG_DNS_RESOLVER=resolver,
            LAYANG_MX_PORT=str(port),
            LAYANG_MX_ALLOW_PRIVATE="true",  # the bench's MX hosts are on private addresses
            LAYANG_SHAPING_FILE=str(shaping_file(base / "shaping.toml", args.sites, args.limit)),
            LAYANG_EHLO_NAME="bench.sender.example",
        )
        sites.set(args.latency_ms, 0)
        messages = [outgoing(i, args.domains) for i in range(n)]
        print(
            f"Direct to MX: {n} messages, {args.domains} domains on {args.sites} sites, "
            f"{args.latency_ms:g} ms per reply; Layang: one `layang worker`, mx:, "
            f"{args.limit} sessions per site, PostgreSQL; Postfix {postfix_version()}, "
            f"transport_maps per domain, default concurrency; {os.cpu_count()} cores; "
            f"--repeat {args.repeat}",
            flush=True,
        )

        def run(rep: int) -> dict[str, float]:
            timings: dict[str, float] = {}
            for side in ("postfix", "layang") if rep % 2 == 0 else ("layang", "postfix"):
                if side == "postfix":
                    postfix.submit(composed(messages), xverp=False)
                    sites.expect(n)
                    started = time.monotonic()
                    postfix.release()
                    drained = sites.wait(3600)
                    timings["postfix"] = drained.last - started
                    postfix.wait_empty()
                else:
                    layang.fill(messages)
                    drained = layang.drain(sites, n)
                    timings["layang"] = drained.last - drained.started
                    timings["startup"] = drained.first - drained.started
                time.sleep(0.5)
                stats = sites.stats()
                timings[f"peak-{side}"] = max(peaks(stats))
                if (extra := sum(s["delivered"] for s in stats["sites"]) - n) > 0:
                    notes.append(f"rep {rep + 1}: {side} delivered {extra} twice")
            return timings

        if args.profile:
            profile(layang, sites, messages, base)
            args.repeat, args.no_curve = 0, True
        for rep in range(args.repeat):
            timings = retrying(f"rep {rep + 1}", lambda rep=rep: run(rep), notes, args.admin_url)
            rows["postfix"].append(n / timings["postfix"])
            rows["layang"].append(n / timings["layang"])
            rows["ratio"].append(timings["postfix"] / timings["layang"])
            peak_layang.append(int(timings["peak-layang"]))
            peak_postfix.append(int(timings["peak-postfix"]))
            print(
                f"  rep {rep + 1}: Postfix {timings['postfix']:.2f} s "
                f"({n / timings['postfix']:.1f} msg/s, peak {timings['peak-postfix']:.0f} "
                f"sessions per site), Layang {timings['layang']:.2f} s "
                f"({n / timings['layang']:.1f} msg/s, first delivery "
                f"{timings['startup']:.2f} s after the release, "
                f"peak {timings['peak-layang']:.0f} per site), "
                f"ratio {timings['postfix'] / timings['layang']:.3f}",
                flush=True,
            )

        curve: dict | None = None
        if not args.no_curve:

            def throttled() -> dict:
                layang.fill(messages)
                sites.expect(n)
                sites.throttle(0, n // 2, args.throttle_seconds)
                layang.drain(sites, n)
                return sites.stats()

            curve = retrying("drain curve", throttled, notes, args.admin_url)
        completed = True
    finally:
        postfix.stop()
        sites.stop()
        dns.stop()
        print()
        if rows["ratio"]:
            print(
                f"| Postfix msg/s | Layang msg/s | Layang / Postfix, median [min-max] of "
                f"{len(rows['ratio'])} | peak sessions per site: Layang (limit {args.limit}) "
                f"| Postfix |"
            )
            print("|---|---|---|---|---|")
            print(
                f"| {statistics.median(rows['postfix']):.1f} | "
                f"{statistics.median(rows['layang']):.1f} | {spread(rows['ratio'])} | "
                f"{max(peak_layang)} | {max(peak_postfix)} |"
            )
            if max(peak_layang) > args.limit:
                print(f"LIMIT EXCEEDED: Layang had {max(peak_layang)} sessions on one site")
        if curve is not None:
            report_curve(curve, args)
        for note in notes:
            print("note:", note)
        if layang is not None:
            layang.close()
        if completed:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"Logs (Postfix's maillog, the workers') kept in {base}")


def profile(layang: MxLayang, sites: Sites, messages: list, base: Path) -> None:
    import pstats

    layang.profile = base / "prof"
    layang.profile.mkdir()
    layang.fill(messages)
    drained = layang.drain(sites, len(messages))
    stats = sites.stats()
    rate = len(messages) / (drained.last - drained.first)
    print(
        f"  profiled, one process: {len(messages)} messages in "
        f"{drained.last - drained.started:.2f} s ({rate:.1f} msg/s after the first delivery), "
        f"peak {max(peaks(stats))} sessions per site"
    )
    for path in sorted(layang.profile.glob("*.prof")):
        table = pstats.Stats(str(path))
        if table.total_tt < 0.5:  # type: ignore[attr-defined]
            continue
        print(f"\n=== thread {path.stem}: {table.total_tt:.2f} s profiled")  # type: ignore[attr-defined]
        table.sort_stats("tottime").print_stats(25)
    shutil.copytree(layang.profile, Path(tempfile.gettempdir()) / f"mx-profile-{os.getpid()}")
    print(f"profiles kept in {tempfile.gettempdir()}/mx-profile-{os.getpid()}")


def report_curve(curve: dict, args: argparse.Namespace) -> None:
    throttled = curve["sites"][0]
    print()
    print(
        f"Drain curve (Layang): site {throttled['host']} answers 421 4.7.28 to every MAIL for "
        f"{args.throttle_seconds:g} s once half the messages are delivered "
        f"(it refused {throttled['refused']} MAIL, opened {throttled['sessions']} sessions, "
        f"peak {throttled['peak']}); peak per site overall {max(peaks(curve))}"
    )
    for line in curve_table(curve, 0, args.curve_step):
        print(line)
    if curve["throttled_at"] is None:
        return
    start = curve["throttled_at"] - curve["t0"]
    end = start + args.throttle_seconds
    others = collections.Counter()
    for site in curve["sites"][1:]:
        for second, count in site["buckets"].items():
            others[int(second)] += count
    if not others:
        return
    # Whole seconds only, and only while the other sites still had mail: the three before the
    # 421s start (the start-up left out), and those from then until the others ran out.
    first, last = min(others), max(s for s, count in others.items() if count)
    before = [others[s] for s in range(max(first + 1, int(start) - 3), int(start))]
    during = [others[s] for s in range(int(start) + 1, min(int(end), last - 1))]
    if before and during:
        print(
            f"  other sites: {statistics.mean(before):.1f} msg/s in the 3 s before the 421s, "
            f"{statistics.mean(during):.1f} msg/s while they last and the others have mail "
            f"({statistics.mean(during) / statistics.mean(before):.2f}x)"
        )


if __name__ == "__main__":
    main()
