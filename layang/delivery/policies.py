"""The transport-policy cache: what each recipient domain asks of TLS, looked up once a minute.

A domain's policy (DANE, MTA-STS, a shaping rule's ``tls = "required"``, else opportunistic;
see :mod:`layang.destinations.policy` and docs/delivery.md) decides which MX hosts a session
may use and what its TLS must show. MTA-STS policies are cached in the database for their
``max_age``; this cache spares the DNS look-ups on every batch.
"""

from __future__ import annotations

import logging
import time

from layang.destinations import policy as tls_policy
from layang.destinations.mx import Destination
from layang.destinations.policy import TransportPolicy

log = logging.getLogger("layang.engine")

POLICY_SECONDS = 60.0
"""A domain's transport policy is looked at again after this long."""
MAX_DOMAINS = 10_000
"""More domains than this and the cache starts over (a bound, not an eviction policy)."""


class PolicyCache:
    """Transport policies by domain, each kept ``POLICY_SECONDS``; for one event loop."""

    def __init__(self) -> None:
        self._policies: dict[str, tuple[float, TransportPolicy]] = {}

    async def policy(self, transport: object, resolved: Destination) -> TransportPolicy:
        """The policy of ``resolved``'s domain (its MX hosts as resolved now), looked up with
        ``transport``'s resolver and settings (an :class:`~layang.delivery.direct.MxTransport`).
        A look-up that fails for a bug gives no policy rather than no mail (logged)."""
        cached = self._policies.get(resolved.domain)
        now = time.monotonic()
        hosts = tuple(h.name for h in resolved.hosts)
        if cached is not None and cached[0] > now and cached[1].mx_hosts == hosts:
            return cached[1]
        try:
            policy = await tls_policy.policy_for(
                resolved.domain,
                hosts,
                transport.dns_resolver(),  # type: ignore[attr-defined]
                settings=transport.tls_settings,  # type: ignore[attr-defined]
            )
        except Exception:  # never lose mail to a policy look-up bug: no policy then
            log.exception("transport policy of %s failed", resolved.domain)
            policy = TransportPolicy(resolved.domain, mx_hosts=hosts)
        if resolved.rule.tls == "required":
            policy = policy.requiring_tls()
        if len(self._policies) > MAX_DOMAINS:
            self._policies.clear()
        self._policies[resolved.domain] = (now + POLICY_SECONDS, policy)
        return policy
