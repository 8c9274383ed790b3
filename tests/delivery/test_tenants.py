"""Tenants sharing a provider's site, end to end on the simulated internet: one account's
domains never steer another account's mail (which server it goes to, whether its site is held
back, which remote reply text it shows). docs/delivery.md, "Sites and shaping"."""

from __future__ import annotations

import collections
import json
import time
from dataclasses import replace

import pytest

from layang.destinations import sites
from layang.domain import accounts
from layang.models import Recipient
from tests.conftest import BACKENDS
from tests.delivery.test_direct import (
    Running,
    last_event,
    send_to,
    settled,
    status_of,
    wait_until,
)
from tests.support.policy_server import PolicyServer
from tests.support.tls_pki import LocalCA


@pytest.fixture
def mx_config(config, internet):
    return internet.configure(replace(config, retry_base_seconds=30))


def other_account_auth(name: str = "mallory") -> dict[str, str]:
    account = accounts.create_account(name, live=True)
    return {"Authorization": f"Bearer {accounts.create_api_key(account, 'tests')[1]}"}


def test_a_session_to_one_mx_set_never_carries_another_domains_mail(
    client, auth, mx_config, internet
):
    # A domain whose own MX comes first and names a Microsoft 365 host as its backup: it
    # once joined the site protection.outlook.com, and its session to mx.evil.example was
    # reused for every M365-hosted domain.
    evil_mx = internet.server("mx.evil.example")
    internet.server("evil-example.mail.protection.outlook.com")
    internet.domain(
        "evil.example", (10, "mx.evil.example"), (20, "evil-example.mail.protection.outlook.com")
    )
    tenant = internet.server("victim-example.mail.protection.outlook.com")
    internet.domain("victim.example", (10, "victim-example.mail.protection.outlook.com"))
    mallory = other_account_auth()
    running = Running(mx_config)
    try:
        # Mallory's mail opens sessions to mx.evil.example, kept idle for the next job…
        mallory_mail = [f"m{n}@evil.example" for n in range(5)]
        send_to(client, mallory, mallory_mail)
        wait_until(lambda: settled(mallory_mail), 30, "mallory's mail did not settle")
        # …and the account's mail to an M365-hosted domain comes at once.
        victims = [f"r{n}@victim.example" for n in range(30)]
        send_to(client, auth, victims)
        wait_until(lambda: settled(victims), 30, "the victim's mail did not settle")
    finally:
        running.stop()
    assert sorted(evil_mx.delivered_to()) == sorted(mallory_mail)
    assert sorted(tenant.delivered_to()) == sorted(victims)
    for address in victims:
        status, detail = last_event(address)
        assert (status, detail["host"]) == ("Delivery", tenant.name)
    assert collections.Counter(r.status for r in Recipient.select()) == {"Delivery": 35}


@pytest.fixture
def ca(tmp_path):
    return LocalCA(tmp_path / "ca")


def test_a_domains_own_policy_failures_never_suspend_its_providers_site(
    client, auth, mx_config, internet, ca
):
    # Three M365-hosted domains of one account publish an enforced MTA-STS policy naming
    # none of their MX hosts: no host of theirs may be tried. That is theirs to fix, not
    # Microsoft's: once it was counted as three connection failures of the site, which
    # suspended protection.outlook.com for every account.
    broken = [f"a{n}.example" for n in range(1, 4)]
    policy_server = PolicyServer(ca.server_context(*(f"mta-sts.{d}" for d in broken)))
    policy_server.serve("version: STSv1\nmode: enforce\nmx: mx.nowhere.example\nmax_age: 86400\n")
    for n, domain in enumerate(broken, 1):
        host = f"a{n}-example.mail.protection.outlook.com"
        internet.server(host)
        internet.domain(domain, (10, host))
        internet.zone.add_address(f"mta-sts.{domain}", policy_server.address)
        internet.zone.add_txt(f"_mta-sts.{domain}", "v=STSv1; id=20261129")
    tenant = internet.server("victim-example.mail.protection.outlook.com")
    internet.domain("victim.example", (10, "victim-example.mail.protection.outlook.com"))
    mallory = other_account_auth()
    config = replace(mx_config, tls_cafile=str(ca.cafile))
    running = Running(config)
    try:
        mallory_mail = [f"m{n}@{d}" for d in broken for n in range(3)]
        send_to(client, mallory, mallory_mail)
        wait_until(lambda: settled(mallory_mail), 30, "mallory's mail did not settle")
        time.sleep(1.5)  # the sessions and slots of that mail are gone
        victims = [f"r{n}@victim.example" for n in range(20)]
        started = time.monotonic()
        send_to(client, auth, victims)
        wait_until(lambda: settled(victims), 30, "the victim's mail did not settle")
        took = time.monotonic() - started
    finally:
        running.stop()
        policy_server.stop()
    assert sorted(tenant.delivered_to()) == sorted(victims)
    assert {status_of(a) for a in victims} == {"Delivery"}
    assert took < 10
    for address in mallory_mail:
        status, detail = last_event(address)
        assert status == "Delay" and "site" not in detail, detail
    site = sites.gate("protection.outlook.com")
    assert (site.state, site.reason) == ("ok", None)


def test_an_accounts_own_mx_saying_slow_down_never_throttles_its_providers_site(
    client, auth, mx_config, internet
):
    # Mallory's own server comes first and says "slow down"; her backup names an M365 host.
    internet.server("mx.evil.example", slow_down_after=0)
    internet.server("evil-example.mail.protection.outlook.com")
    internet.domain(
        "evil.example", (10, "mx.evil.example"), (20, "evil-example.mail.protection.outlook.com")
    )
    tenant = internet.server("victim-example.mail.protection.outlook.com")
    internet.domain("victim.example", (10, "victim-example.mail.protection.outlook.com"))
    mallory = other_account_auth()
    running = Running(mx_config)
    try:
        mallory_mail = [f"m{n}@evil.example" for n in range(3)]
        send_to(client, mallory, mallory_mail)
        wait_until(lambda: settled(mallory_mail), 30, "mallory's mail did not settle")
        victims = [f"r{n}@victim.example" for n in range(10)]
        send_to(client, auth, victims)
        wait_until(lambda: settled(victims), 30, "the victim's mail did not settle")
    finally:
        running.stop()
    assert sorted(tenant.delivered_to()) == sorted(victims)
    assert sites.gate("protection.outlook.com").state == "ok"


def test_a_sites_shared_state_shows_no_accounts_server_reply_to_another(
    client, auth, mx_config, internet
):
    # The account's tenant says "slow down" in words naming its recipient; the site is
    # throttled for everyone, and Mallory's mail to another tenant waits on it.
    secret = "421 4.7.28 r0@acme-tenant.example: unusual rate from acme-tenant.example"
    internet.server(
        "acme-tenant.mail.protection.outlook.com", slow_down_after=0, slow_down_reply=secret
    )
    internet.domain("acme-tenant.example", (10, "acme-tenant.mail.protection.outlook.com"))
    other = internet.server("other-tenant.mail.protection.outlook.com")
    internet.domain("other-tenant.example", (10, "other-tenant.mail.protection.outlook.com"))
    mallory = other_account_auth()
    config = replace(mx_config, throttle_start_seconds=30)
    running = Running(config)
    try:
        send_to(client, auth, ["r0@acme-tenant.example"])
        wait_until(lambda: settled(["r0@acme-tenant.example"]), 30, "the first mail waits")
        wait_until(lambda: sites.gate("protection.outlook.com").state == "throttled", 10)
        send_to(client, mallory, ["m0@other-tenant.example"])
        wait_until(lambda: settled(["m0@other-tenant.example"]), 30, "mallory's mail waits")

        # (The queue places a domain in its site once the worker has recorded which it is.)
        def mallorys_queue():
            return client.get("/v1/layang/queue", headers=mallory).get_json()

        wait_until(
            lambda: [i["site"] for i in mallorys_queue()["items"]] == ["protection.outlook.com"],
            10,
            lambda: f"mallory's queue: {mallorys_queue()}",
        )
        queue = mallorys_queue()
    finally:
        running.stop()
    assert not other.delivered_to()
    # The account whose mail got the reply sees it whole…
    assert last_event("r0@acme-tenant.example")[1]["reply"] == secret
    # …another account sees only Layang's words: the site, the state, the codes.
    status, detail = last_event("m0@other-tenant.example")
    assert (status, detail["site"], detail["reply"]) == (
        "Delay",
        "protection.outlook.com",
        "slow down: 421 4.7.28",
    )
    (item,) = queue["items"]
    assert (item["state"], item["reason"]) == ("throttled", "slow down: 421 4.7.28")
    assert "acme" not in json.dumps(queue)


@pytest.mark.parametrize("backend", BACKENDS)  # the claim of others' mail, on both
def test_an_account_at_slow_servers_never_holds_every_session_of_the_worker(
    client, auth, mx_config, internet
):
    # The account sends to six domains whose servers take 1.5 s over every reply: they
    # could fill every session of the worker for as long as their mail lasts.
    slow = []
    for n in range(6):
        internet.server(f"mx.slow{n}.example", latency=1.5)
        internet.domain(f"slow{n}.example", (10, f"mx.slow{n}.example"))
        slow.append(f"slow{n}.example")
    quick = internet.server("mx.quick.example")
    internet.domain("quick.example", (10, "mx.quick.example"))
    mallory = other_account_auth()
    running = Running(mx_config, worker_connections=20)
    try:
        send_to(client, auth, [f"r{n}@{domain}" for domain in slow for n in range(10)])
        servers = [internet.servers[f"mx.{domain}"] for domain in slow]
        wait_until(lambda: sum(s.open_sessions for s in servers) >= 15, 20, "no sessions")
        started = time.monotonic()
        send_to(client, mallory, ["m0@quick.example"])
        wait_until(lambda: quick.delivered_to(), 30, "mallory's mail never went")
        waited = time.monotonic() - started
    finally:
        running.stop()
    # The other account's mail went at once (setting up one session at the slow servers
    # alone takes over 10 s: 1.5 s a reply line).
    assert waited < 4, waited
    assert sum(s.peak_sessions for s in servers) <= 20


def test_a_slow_server_holds_a_session_no_longer_than_its_deadlines(
    client, auth, mx_config, internet
):
    internet.server("mx.slowsetup.example", latency=1)  # 1 s a reply line: 9 s to EHLO
    internet.domain("slowsetup.example", (10, "mx.slowsetup.example"))
    # Set up at once, but the end of each message is answered after 5 s.
    internet.server("mx.slowreply.example").slow_down(5)
    internet.domain("slowreply.example", (10, "mx.slowreply.example"))
    config = replace(mx_config, mx_setup_seconds=6, mx_transaction_seconds=2)
    running = Running(config)
    try:
        send_to(client, auth, ["ana@slowsetup.example", "bo@slowreply.example"])
        wait_until(lambda: settled(["ana@slowsetup.example", "bo@slowreply.example"]), 30)
    finally:
        running.stop()
    status, detail = last_event("ana@slowsetup.example")
    assert (
        status == "Delay"
        and "no session to mx.slowsetup.example set up within 6 s" in detail["reply"]
    ), detail
    status, detail = last_event("bo@slowreply.example")
    assert status == "Delay" and "not finished within 2 s" in detail["reply"], detail
    assert detail["host"] == "mx.slowreply.example"


def test_an_account_queued_behind_another_at_one_server_gets_its_share_of_it(
    client, auth, mx_config, internet
):
    # Both accounts' domains name the same (slow) MX host: one destination, one queue.
    server = internet.server("mx.hosting.example", latency=0.3)
    internet.domain("big.example", (10, "mx.hosting.example"))
    internet.domain("small.example", (10, "mx.hosting.example"))
    mallory = other_account_auth()
    running = Running(mx_config, worker_connections=10)
    try:
        bulk = [f"r{n}@big.example" for n in range(90)]
        send_to(client, auth, bulk)
        wait_until(lambda: server.open_sessions >= 9, 20, "no sessions")
        send_to(client, mallory, ["m0@small.example"])
        wait_until(lambda: settled([*bulk, "m0@small.example"]), 60, "the mail did not settle")
    finally:
        running.stop()
    order = server.delivered_to()
    assert sorted(order) == sorted([*bulk, "m0@small.example"])
    # Mallory's message did not wait for the whole of the bulk ahead of it in the queue.
    assert order.index("m0@small.example") < len(order) - 30, order
