"""Two hosts (network namespaces) share one site limit through one PostgreSQL."""

from __future__ import annotations

import collections
import sys
from urllib.parse import urlsplit, urlunsplit

import pytest
from dnslib.server import DNSServer

from tests.delivery.test_crash import process_env, stop, wait_until
from tests.delivery.test_direct import send_to
from tests.support.dns_server import QuietLogger
from tests.support.internet import MxServer, _shared_port

pytestmark = pytest.mark.parametrize("backend", ["postgresql"])


def test_two_hosts_share_one_site_limit(client, auth, config, dns_zone, two_hosts, tmp_path):
    """Two workers in separate network namespaces, as two hosts, share one PostgreSQL (through
    a relay on the machine) and one MX server: together they never exceed the site's limit."""

    gateway = two_hosts.gateway
    dns = DNSServer(dns_zone, address=gateway, port=0, logger=QuietLogger())
    dns.start_thread()
    port = _shared_port()
    server = MxServer("mx.two-hosts.example", gateway, port, latency=0.03)
    dns_zone.add_a("mx.two-hosts.example", gateway)
    for n in range(3):
        dns_zone.add_mx(f"h{n}.example", 10, "mx.two-hosts.example")
    shaping = tmp_path / "shaping.toml"
    shaping.write_text('[site."two-hosts.example"]\nconnections = 2\n')
    addresses = [f"r{i}@h{i % 3}.example" for i in range(150)]
    send_to(client, auth, addresses)
    database = urlsplit(config.database_url)
    relayed = two_hosts.forward(database.hostname, database.port or 5432)
    netloc = f"{database.username}:{database.password}@{gateway}:{relayed}"
    database_url = urlunsplit((database.scheme, netloc, database.path, "", ""))
    env = process_env(
        config,
        LAYANG_DATABASE_URL=database_url,
        LAYANG_RELAY_URL="mx:",
        LAYANG_DNS_RESOLVER=f"{gateway}:{dns.server.server_address[1]}",
        LAYANG_MX_PORT=port,
        LAYANG_SHAPING_FILE=shaping,
        LAYANG_WORKER_BATCH_SIZE=10,  # small claims, so that both hosts get a share
    )
    workers = [
        two_hosts.run(
            n,
            [sys.executable, "-m", "layang", "worker", "--processes", "1"],
            env,
            tmp_path / f"h{n}.log",
        )
        for n in range(2)
    ]
    try:
        wait_until(
            lambda: len(server.delivered_to()) >= 150,
            90,
            "\n".join(p.read_text()[-3000:] for p in tmp_path.glob("h*.log")),
        )
    finally:
        for worker in workers:
            stop(worker)
        server.stop()
        dns.stop()
        dns.server.server_close()
    assert collections.Counter(server.delivered_to()) == collections.Counter(addresses)
    peers = {peer for peer, _ in server.greeted}
    assert peers == {"10.213.1.2", "10.213.2.2"}  # both hosts delivered
    assert server.peak_sessions <= 2
