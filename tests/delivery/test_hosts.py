"""Two hosts (network namespaces) reach the simulated internet and one PostgreSQL over the
network, as two sending machines would: the plumbing the multi-host delivery tests stand on."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from tests.test_cli import ROOT

SENDER = textwrap.dedent(
    """
    import asyncio, json, smtplib, sys
    from layang.db import open_database
    from layang.delivery import sites
    from layang.delivery.mx import MxResolver
    from layang.delivery.shaping import Shaping

    dns, port, database, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    destination = asyncio.run(MxResolver(dns, Shaping.load(None), 5).resolve("far.example"))
    open_database(database)
    slot = sites.acquire_slot(destination.site, name, 10, 60_000)
    host = destination.hosts[0].addresses[0]
    with smtplib.SMTP(host, port, local_hostname=name, timeout=10) as smtp:
        smtp.sendmail("a@sender.test", [f"{name}@far.example"], b"Subject: x\\r\\n\\r\\nhi\\r\\n")
    print(json.dumps({"site": destination.site, "slot": bool(slot)}))
    """
)


@pytest.mark.parametrize("backend", ["postgresql"])
def test_two_hosts_share_the_internet_and_the_database(app, config, internet, network):
    mx = internet.server("mx.far.example", host=network.address())
    internet.domain("far.example", (10, "mx.far.example"))
    dns = network.dns(internet.zone)
    database = network.postgres_url(config.database_url)
    outputs = []
    for host in network.hosts:
        done = host.run(
            [sys.executable, "-c", SENDER, dns, str(internet.port), database, host.namespace],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        outputs.append(json.loads(done.stdout))
    assert outputs == [{"site": "mx.far.example", "slot": True}] * 2
    assert sorted(mx.delivered_to()) == sorted(f"{h.namespace}@far.example" for h in network.hosts)
    assert sorted(mx.peers) == sorted(h.address for h in network.hosts)
    from layang.delivery import sites

    assert sites.open_sessions("mx.far.example") == 2  # both slots, taken over the network
