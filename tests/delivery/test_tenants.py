"""Tenants sharing a provider's site, end to end on the simulated internet: one account's
domains never steer another account's mail (which server it goes to, whether its site is held
back, which remote reply text it shows). docs/delivery.md, "Sites and shaping"."""

from __future__ import annotations

import collections
from dataclasses import replace

import pytest

from layang.domain import accounts
from layang.models import Recipient
from tests.delivery.test_direct import Running, last_event, send_to, settled, wait_until


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
