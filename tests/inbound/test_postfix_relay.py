"""A real MTA in front: a private Postfix (Debian's package, an instance of its own under a temp
dir) relays mail for a route's domain to ``layang inbound``, as a sending server on the
internet would; every message it hands over is posted to the route's endpoint."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from layang.inbound.server import inbound_server
from layang.webhooks.dispatcher import Dispatcher
from tests.conftest import BACKENDS
from tests.delivery.test_crash import free_port
from tests.inbound.test_routing import DOMAIN, add_route, add_verified_domain

pytestmark = pytest.mark.parametrize("backend", BACKENDS)


@pytest.fixture
def config(config, dns_zone):
    return replace(
        config,
        inbound_bind=f"127.0.0.1:{free_port()}",
        inbound_hostname="mx.layang.example",
        dns_resolver=dns_zone.address,
        webhook_allow_private=True,
    )


@pytest.fixture
def postfix_tools():
    if not (Path("/usr/sbin/postfix").exists() and Path("/usr/sbin/postsuper").exists()):
        if os.environ.get("LAYANG_REQUIRE_TOOLS"):
            pytest.fail("Postfix is required here (.ci/run installs it, with no system instance)")
        pytest.skip("Postfix is not installed (apt-get install postfix, 'No configuration')")


def test_mail_relayed_by_postfix_reaches_the_endpoint(
    client, auth, config, app, dns_zone, receiver, postfix_tools, tmp_path
):
    from bench.support.postfix import PrivatePostfix

    add_verified_domain(client, auth, dns_zone)
    add_route(client, auth, f"support@{DOMAIN}", url=receiver.url)
    server = inbound_server(config)
    server.start()
    stop = threading.Event()
    dispatcher = Dispatcher(config, name="postfix-relay")
    thread = threading.Thread(target=dispatcher.run, args=(stop,), daemon=True)
    thread.start()
    postfix = PrivatePostfix(tmp_path / "postfix", server.port)
    try:
        postfix.start()
        messages = [
            (
                [f"support+{n}@{DOMAIN}"],
                f"From: ann@sender.example\r\nTo: support+{n}@{DOMAIN}\r\n"
                f"Subject: through postfix {n}\r\n\r\nHello {n}.\r\n".encode(),
            )
            for n in range(3)
        ]
        postfix.submit(messages, xverp=False)
        postfix.release()
        postfix.wait_empty()  # Postfix handed every message over: each got its 250
        requests = receiver.wait_for_requests(3, timeout=30)
    finally:
        postfix.stop()
        stop.set()
        thread.join(30)
        server.stop()
    posted = sorted(requests, key=lambda r: r.payload["message"]["mailboxHash"])
    assert [r.payload["message"]["subject"] for r in posted] == [
        f"through postfix {n}" for n in range(3)
    ]
    assert [r.payload["message"]["mailboxHash"] for r in posted] == ["0", "1", "2"]
    received = [
        h["value"] for h in posted[0].payload["message"]["headers"] if h["name"] == "Received"
    ]
    assert any("postfix.bench.local" in value for value in received)
    assert posted[0].payload["message"]["text"] == "Hello 0.\n"
