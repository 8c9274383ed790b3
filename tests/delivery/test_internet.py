"""The simulated internet the direct-to-MX tests run on: MX hosts on distinct loopback
addresses and one port, each with its own behaviour, found through the real DNS server."""

from __future__ import annotations

import asyncio
import smtplib
import socket
import time

import dns.resolver
import pytest

from layang.destinations.mx import MxFailure, MxResolver
from layang.destinations.shaping import Shaping
from tests.support.internet import GREYLISTED, SLOW_DOWN


def smtp(server) -> smtplib.SMTP:
    client = smtplib.SMTP(server.host, server.port, local_hostname="client.test", timeout=5)
    client.ehlo()
    return client


def send(client: smtplib.SMTP, rcpt: str) -> dict:
    return client.sendmail("a@sender.test", [rcpt], b"Subject: hi\r\n\r\nhello\r\n")


def test_hosts_answer_on_their_own_address_and_the_shared_port(internet):
    first = internet.server("mx.a.example")
    second = internet.server("mx.b.example", ipv6=True)
    internet.domain("a.example", (10, "mx.a.example"))
    assert first.host == "127.0.0.2" and second.host == "::1" and first.port == second.port
    resolver = dns.resolver.Resolver(configure=False)
    host, port = internet.resolver.split(":")
    resolver.nameservers = [dns.nameserver.Do53Nameserver(host, int(port))]
    mx = resolver.resolve("a.example", "MX")[0].exchange.to_text(omit_final_dot=True)
    assert resolver.resolve(mx, "A")[0].address == "127.0.0.2"
    for server, rcpt in ((first, "x@a.example"), (second, "y@b.example")):
        with smtp(server) as client:
            send(client, rcpt)
    assert first.delivered_to() == ["x@a.example"] and second.delivered_to() == ["y@b.example"]


def test_slow_down_after_k_messages_closes_the_session(internet):
    server = internet.server("mx.slow.example", slow_down_after=2)
    client = smtp(server)
    send(client, "1@slow.example")
    send(client, "2@slow.example")
    with pytest.raises(smtplib.SMTPSenderRefused) as refused:
        send(client, "3@slow.example")
    assert refused.value.smtp_code == 421 and SLOW_DOWN[4:30] in refused.value.smtp_error.decode()
    assert server.slow_downs == 1 and len(server.received) == 2
    with smtp(server) as again:  # a new session starts the count again
        send(again, "3@slow.example")


def test_greylisting_latency_refusal_and_peak_sessions(internet):
    grey = internet.server("mx.grey.example", greylist=True, latency=0.05)
    client = smtp(grey)
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        send(client, "r@grey.example")
    assert refused.value.recipients["r@grey.example"] == (451, GREYLISTED[4:].encode())
    started = time.monotonic()
    send(client, "r@grey.example")
    assert time.monotonic() - started >= 0.15  # MAIL, RCPT, DATA each 50 ms late
    others = [smtp(grey) for _ in range(3)]
    for other in [client, *others]:
        other.quit()
    assert grey.peak_sessions == 4
    time.sleep(0.2)
    assert grey.open_sessions == 0
    gone = internet.server("mx.gone.example", refuse=True)
    with pytest.raises(ConnectionRefusedError), socket.create_connection((gone.host, gone.port)):
        pass


def test_the_standard_zone_resolves_as_each_behaviour_says(internet):
    world = internet.standard()
    resolver = MxResolver(internet.resolver, Shaping.load(None), timeout=2.0, allow_private=True)

    async def outcome(domain):
        try:
            destination = await resolver.resolve(domain)
        except MxFailure as failure:
            return failure.kind
        return destination

    results = {k: asyncio.run(outcome(d)) for k, d in world.items()}
    assert results["null_mx"] == "null_mx" and results["nxdomain"] == "no_domain"
    assert results["mx_nxdomain"] == "no_domain"
    assert results["servfail"] == "temporary"
    assert results["normal"].site == results["shared"].site == "mx.normal.example"
    assert results["provider"].site == "google.com"
    assert results["implicit_mx"].hosts[0].addresses == (internet.servers["implicit.example"].host,)
    assert [h.name for h in results["refusing_primary"].hosts] == [
        "mx1.backup.example",
        "mx2.backup.example",
    ]
    assert len(results["equal_pair"].hosts) == 2
    assert results["ipv6"].hosts[0].addresses == ("::1",)
    primary = internet.servers["mx1.backup.example"]
    with (
        pytest.raises(ConnectionRefusedError),
        socket.create_connection((primary.host, primary.port)),
    ):
        pass
    hang = internet.servers["mx.hang.example"]
    client = smtp(hang)
    client.sock.settimeout(0.5)
    with pytest.raises((TimeoutError, socket.timeout, smtplib.SMTPServerDisconnected)):
        send(client, "x@hang.example")
    assert hang.wait_stalled(1)
    hang.release()
