"""Site limits hold across worker processes: every process and host sharing the database obeys
one limit per site, counted at the MX server."""

from __future__ import annotations

import collections

import pytest

from tests.conftest import BACKENDS
from tests.delivery.test_crash import process_env, start, stop, wait_until
from tests.delivery.test_direct import send_to

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


def test_two_worker_processes_share_one_site_limit(client, auth, config, internet, tmp_path):
    shaping = tmp_path / "shaping.toml"
    shaping.write_text('[site."shared-limit.example"]\nconnections = 3\n')
    server = internet.server("mx.shared-limit.example", latency=0.03)
    for n in range(4):
        internet.domain(f"c{n}.example", (10, "mx.shared-limit.example"))
    addresses = [f"r{i}@c{i % 4}.example" for i in range(300)]
    send_to(client, auth, addresses)
    env = process_env(
        config,
        LAYANG_RELAY_URL="mx:",
        LAYANG_DNS_RESOLVER=internet.resolver,
        LAYANG_MX_PORT=internet.port,
        LAYANG_SHAPING_FILE=shaping,
    )
    workers = [start(["worker", "--processes", "2"], env, tmp_path / f"w{n}.log") for n in range(2)]
    try:
        wait_until(
            lambda: len(server.delivered_to()) >= 300,
            90,
            "\n".join(p.read_text()[-3000:] for p in tmp_path.glob("w*.log")),
        )
    finally:
        for worker in workers:
            stop(worker)
    assert collections.Counter(server.delivered_to()) == collections.Counter(addresses)
    assert server.peak_sessions <= 3
    # Four processes competed; the peak shows they used the limit, not one session.
    assert server.peak_sessions >= 2
