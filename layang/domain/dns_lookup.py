"""DNS look-ups for checking sending domains: what a name's TXT or MX records say right now.

A look-up never raises: a failure (no such name, no answer, SERVFAIL, timeout) is an answer
with no values and the reason, which the checks report as ``missing``.
"""

from __future__ import annotations

from dataclasses import dataclass

import dns.exception
import dns.rdatatype
import dns.resolver
import dns.reversename

from layang.config import Config
from layang.destinations.dns import lookup_resolver

TIMEOUT_SECONDS = 3.0


@dataclass(frozen=True)
class Answer:
    """The values found at a name (TXT strings joined, MX as ``preference host``), or none
    and ``problem``, one sentence saying why."""

    values: tuple[str, ...] = ()
    problem: str | None = None


class DnsLookup:
    """Looks names up at ``LAYANG_DNS_RESOLVER``'s servers, or the system's resolver, asking
    again every time (a check says what DNS answers now); ``timeout`` in seconds."""

    def __init__(self, config: Config, timeout: float = TIMEOUT_SECONDS) -> None:
        self.resolver = lookup_resolver(config, timeout)

    def _resolve(self, name: str, rdtype: str) -> tuple[list[object], str | None]:
        try:
            answer = self.resolver.resolve(name, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN:
            return [], f"{name} does not exist (NXDOMAIN)."
        except dns.resolver.NoNameservers:
            return [], f"The DNS servers failed to answer for {name} (SERVFAIL)."
        except dns.resolver.LifetimeTimeout:
            return [], f"The look-up of {name} timed out."
        except dns.resolver.NoResolverConfiguration:
            return [], "No DNS resolver is configured; set LAYANG_DNS_RESOLVER."
        except dns.exception.DNSException as error:
            return [], f"The look-up of {name} failed: {error}"
        if answer.rrset is None:
            return [], f"{name} has no {rdtype} record."
        return list(answer.rrset), None

    def txt(self, name: str) -> Answer:
        records, problem = self._resolve(name, "TXT")
        values = tuple(
            b"".join(record.strings).decode("utf-8", "replace")  # type: ignore[attr-defined]
            for record in records
        )
        return Answer(values, problem)

    def mx(self, name: str) -> Answer:
        records, problem = self._resolve(name, "MX")
        values = tuple(
            f"{record.preference} {record.exchange.to_text(omit_final_dot=True).lower()}"  # type: ignore[attr-defined]
            for record in records
        )
        return Answer(values, problem)

    def cname(self, name: str) -> Answer:
        """The canonical name ``name`` is an alias of, lower-cased, without the final dot."""
        records, problem = self._resolve(name, "CNAME")
        values = tuple(
            record.target.to_text(omit_final_dot=True).lower()  # type: ignore[attr-defined]
            for record in records
        )
        return Answer(values, problem)

    def ptr(self, address: str) -> Answer:
        """The names the reverse zone gives ``address`` (an IP address)."""
        name = dns.reversename.from_address(address).to_text()
        records, problem = self._resolve(name, "PTR")
        values = tuple(
            record.target.to_text(omit_final_dot=True).lower()  # type: ignore[attr-defined]
            for record in records
        )
        return Answer(values, problem)

    def addresses(self, name: str) -> Answer:
        """The IPv4 and IPv6 addresses of ``name``."""
        found: list[str] = []
        problems = []
        for rdtype in ("A", "AAAA"):
            records, problem = self._resolve(name, rdtype)
            found += [record.to_text() for record in records]
            if problem:
                problems.append(problem)
        return Answer(tuple(found), None if found else (problems[0] if problems else None))
