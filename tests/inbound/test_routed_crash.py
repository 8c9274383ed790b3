"""Nothing acknowledged is lost: ``layang inbound`` and ``layang worker`` run as processes and
are killed with SIGKILL in the middle of the flow (mail arriving, posts in flight); every
message that got its 250 still reaches the endpoint, and a post is repeated only as a retry
under the same ``webhook-id``."""

from __future__ import annotations

import signal
import smtplib
import socket
import threading
import time
from collections import defaultdict
from dataclasses import replace

import pytest

from tests.conftest import BACKENDS
from tests.delivery.test_crash import free_port, process_env, start, stop
from tests.inbound.test_routing import DOMAIN, add_route, add_verified_domain
from tests.support.webhook_receiver import Receiver

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
MESSAGES = 40


@pytest.fixture
def config(config, dns_zone):
    return replace(
        config,
        inbound_hostname="mx.layang.example",
        dns_resolver=dns_zone.address,
        webhook_allow_private=True,
    )


def _listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(what)


def test_killing_the_inbound_server_and_the_worker_loses_no_accepted_message(
    client, auth, config, dns_zone, tmp_path
):
    receiver = Receiver(hang_seconds=3.0)
    add_verified_domain(client, auth, dns_zone)
    add_route(client, auth, f"support@{DOMAIN}", url=receiver.url)
    port = free_port()
    env = process_env(
        config,
        LAYANG_INBOUND_BIND=f"127.0.0.1:{port}",
        LAYANG_INBOUND_HOSTNAME="mx.layang.example",
        LAYANG_DNS_RESOLVER=dns_zone.address,
        LAYANG_WEBHOOK_ALLOW_PRIVATE="true",
        LAYANG_WEBHOOK_RETRY_SCHEDULE="0.3,0.3,0.6,1,1,1",
        LAYANG_LEASE_SECONDS=2,
    )
    processes = {
        "inbound": start(["inbound"], env, tmp_path / "inbound.log"),
        "worker": start(["worker"], env, tmp_path / "worker.log"),
    }
    acknowledged: list[str] = []
    sends: dict[str, int] = defaultdict(int)
    done = threading.Event()

    def sender() -> None:
        for n in range(MESSAGES):
            message_id = f"<m{n}@sender.example>"
            while not done.is_set():
                data = (
                    f"From: ann@sender.example\r\nTo: support@{DOMAIN}\r\n"
                    f"Message-ID: {message_id}\r\nSubject: number {n}\r\n\r\nbody {n}\r\n"
                ).encode()
                sends[message_id] += 1
                try:
                    with smtplib.SMTP("127.0.0.1", port, local_hostname="mx.test", timeout=20) as s:
                        s.sendmail("ann@sender.example", [f"support@{DOMAIN}"], data)
                    acknowledged.append(message_id)
                    break
                except (OSError, smtplib.SMTPException):
                    time.sleep(0.1)  # as a sending MTA does: try again later

    thread = threading.Thread(target=sender, daemon=True)
    try:
        _wait(lambda: _listening(port), 60, "the inbound server did not start")
        thread.start()
        _wait(lambda: len(acknowledged) >= 10, 60, "no mail accepted")
        processes["inbound"].send_signal(signal.SIGKILL)
        processes["inbound"].wait(10)
        processes["inbound"] = start(["inbound"], env, tmp_path / "inbound2.log")
        _wait(lambda: len(acknowledged) >= 20, 90, "no mail accepted after the restart")
        # Posts hang at the endpoint: the worker dies with them in flight.
        receiver.script("hang", "hang")
        _wait(lambda: any(r.answered is None for r in receiver.requests), 60, "nothing hung")
        processes["worker"].send_signal(signal.SIGKILL)
        processes["worker"].wait(10)
        processes["worker"] = start(["worker"], env, tmp_path / "worker2.log")
        thread.join(180)
        assert len(acknowledged) == MESSAGES

        def arrived() -> set[str]:
            return {
                header["value"]
                for r in receiver.delivered()
                for header in r.payload["message"]["headers"]
                if header["name"] == "Message-ID"
            }

        _wait(lambda: arrived() >= set(acknowledged), 120, "accepted mail was lost")
    finally:
        done.set()
        for process in processes.values():
            stop(process)
        receiver.stop()

    bodies: dict[str, set[bytes]] = defaultdict(set)
    webhook_ids: dict[str, set[str]] = defaultdict(set)
    for request in receiver.requests:
        bodies[request.headers["webhook-id"]].add(request.body)
        message = request.payload["message"]
        [message_id] = [h["value"] for h in message["headers"] if h["name"] == "Message-ID"]
        webhook_ids[message_id].add(request.headers["webhook-id"])
    # A repeated post is a retry: the same webhook-id, the same bytes.
    assert all(len(found) == 1 for found in bodies.values())
    assert any(
        len([r for r in receiver.requests if r.headers["webhook-id"] == w]) > 1 for w in bodies
    )
    # A message is posted under more than one webhook-id only if its sender sent it again
    # (no 250 came back: the server died between storing it and answering).
    for message_id, ids in webhook_ids.items():
        assert len(ids) <= sends[message_id], message_id
