"""Webhook URLs follow the address rules every connection Layang makes on someone else's say-so
follows (layang/destinations/addresses.py; docs/api.md "Webhooks"): one rule, so the webhook
endpoint, the MX host, the MTA-STS policy host and the TLS-RPT endpoint cannot drift apart."""

from __future__ import annotations

import asyncio

import pytest

from layang.destinations.addresses import (
    REFUSED_ADDRESS,
    Refused,
    Resolver,
    address_refusal,
    resolve,
)
from layang.webhooks import wire
from tests.destinations.test_addresses import INTERNAL, NEVER, REAL_PUBLIC


@pytest.mark.parametrize("allow_private", [False, True])
@pytest.mark.parametrize("address", [*INTERNAL, REAL_PUBLIC])
def test_a_webhook_url_naming_an_address_is_judged_by_the_shared_rule(
    address: str, allow_private: bool
) -> None:
    literal = f"[{address}]" if ":" in address else address
    problem = wire.url_problem(f"https://{literal}/hook", allow_private)
    assert (problem is not None) is (address_refusal(address, allow_private) is not None)
    if problem is not None:
        # The setting is named only where it would lift the refusal.
        assert ("LAYANG_WEBHOOK_ALLOW_PRIVATE" in problem) is (address not in NEVER)


@pytest.mark.parametrize("address", INTERNAL)
def test_the_dispatchers_resolver_refuses_every_internal_address(address: str) -> None:
    with pytest.raises(Refused) as refused:
        asyncio.run(resolve(address, 443, False, Resolver()))
    assert str(refused.value) == f"{address} resolves to {REFUSED_ADDRESS}"
    assert wire.Resolver is Resolver and wire.Refused is Refused  # the one implementation
