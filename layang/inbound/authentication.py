"""Checking who sent routed inbound mail: SPF, DKIM, DMARC and ARC results, as a receiving MX
records them in ``Authentication-Results`` (RFC 8601).

- SPF (RFC 7208) by ``pyspf``, the reference implementation (also behind Debian's
  ``postfix-policyd-spf-python`` and ``spf-engine``), of the ``MAIL FROM`` domain (of the HELO
  name for the null sender) and the client's address;
- DKIM (RFC 6376) and ARC (RFC 8617) by ``dkimpy``: every signature checked, and the domains
  (``d=``) of those that pass kept for DMARC;
- DMARC (RFC 7489): the policy record of the ``From`` domain, or of its organizational domain
  (the Public Suffix List as shipped by ``publicsuffixlist``); ``pass`` when SPF or a DKIM
  signature passes for a domain aligned with ``From`` (relaxed unless ``aspf``/``adkim`` say
  ``s``), ``fail`` otherwise, ``none`` when no record is published.

Every DNS look-up goes to ``LAYANG_DNS_RESOLVER`` (or the system resolver). A look-up that
fails makes the result ``temperror``; nothing here raises.
"""

from __future__ import annotations

import email.utils
import logging
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import dkim
import dns.exception
import dns.resolver
import spf
from publicsuffixlist import PublicSuffixList

from layang.config import Config
from layang.destinations.dns import blocking_resolver

log = logging.getLogger("layang.inbound")

TIMEOUT_SECONDS = 5.0
_SUFFIXES: PublicSuffixList | None = None
_SUFFIXES_LOCK = threading.Lock()
_FROM = re.compile(rb"^from[ \t]*:((?:[^\r\n]|\r?\n[ \t])*)", re.I | re.M)


@dataclass(frozen=True, slots=True)
class Authentication:
    """The results, each ``pass``, ``fail``, ``softfail``, ``neutral``, ``none``,
    ``temperror`` or ``permerror`` (the words of RFC 8601)."""

    spf: str
    dkim: str
    dmarc: str
    arc: str

    def as_json(self) -> dict[str, str]:
        return {"spf": self.spf, "dkim": self.dkim, "dmarc": self.dmarc, "arc": self.arc}


def organizational_domain(domain: str) -> str:
    """The registrable domain of ``domain`` (RFC 7489 section 3.2), or ``domain`` itself."""
    global _SUFFIXES
    with _SUFFIXES_LOCK:
        if _SUFFIXES is None:
            _SUFFIXES = PublicSuffixList()
    return _SUFFIXES.privatesuffix(domain.lower().rstrip(".")) or domain.lower()


class Authenticator:
    """Checks messages with DNS answers from ``config``'s resolvers."""

    def __init__(self, config: Config, timeout: float = TIMEOUT_SECONDS) -> None:
        self.resolver = blocking_resolver(config.dns_resolvers, timeout=timeout)
        self.timeout = timeout

    def _records(self, name: str, rdtype: str) -> list[Any]:
        """The records, [] for none; ``dns.exception.Timeout`` or ``NoNameservers`` for a
        failed look-up."""
        try:
            answer = self.resolver.resolve(name, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN:
            return []
        return [] if answer.rrset is None else list(answer.rrset)

    def _txt(self, name: str) -> list[bytes]:
        return [b"".join(r.strings) for r in self._records(name, "TXT")]

    # pyspf's look-up hook: ((name, type), value) pairs as its own dnspython look-up gives.
    def _spf_lookup(self, name: str, qtype: str, *args: object, **kwargs: object) -> list:
        try:
            records = self._records(name, qtype)
        except (dns.exception.Timeout, dns.resolver.NoNameservers) as error:
            raise spf.TempError(f"DNS {error}") from None
        found: list = []
        for r in records:
            if qtype in ("A", "AAAA"):
                found.append(((name, qtype), r.address))
            elif qtype == "MX":
                found.append(((name, qtype), (r.preference, r.exchange)))
            elif qtype == "PTR":
                found.append(((name, qtype), r.target.to_text(True)))
            elif qtype in ("TXT", "SPF"):
                found.append(((name, qtype), r.strings))
        return found

    def _dkim_txt(self, name: bytes, timeout: float = 5) -> bytes | None:
        try:
            values = self._txt(name.decode("ascii", "replace").rstrip("."))
        except (dns.exception.DNSException, UnicodeError):
            return None
        return values[0] if values else None

    def check_spf(self, client_ip: str, mail_from: str, helo: str) -> tuple[str, str]:
        """(result, the domain checked)."""
        sender = mail_from or f"postmaster@{helo}"
        domain = sender.rpartition("@")[2].lower()
        try:
            query = spf.query(client_ip, sender, helo, timeout=self.timeout, querytime=0)
            with _SPF_LOOKUP_LOCK:
                spf.DNSLookup = self._spf_lookup
                result, _, _ = query.check()
        except Exception as error:
            log.info("SPF check failed: %s", error)
            return "temperror", domain
        return str(result), domain

    def check_dkim(self, data: bytes) -> tuple[str, set[str]]:
        """(result, the domains of the signatures that pass)."""
        try:
            checker = dkim.DKIM(data, timeout=int(self.timeout), minkey=1024)
            signatures = [
                i
                for i, (name, _) in enumerate(checker.headers)
                if name.lower() == b"dkim-signature"
            ]
            if not signatures:
                return "none", set()
            passed: set[str] = set()
            for index in range(len(signatures)):
                try:
                    if checker.verify(idx=index, dnsfunc=self._dkim_txt):
                        passed.add(checker.domain.decode("ascii", "replace").lower())
                except dkim.DKIMException:
                    continue
        except Exception as error:
            log.info("DKIM check failed: %s", error)
            return "permerror", set()
        return ("pass" if passed else "fail"), passed

    def check_arc(self, data: bytes) -> str:
        if (
            b"arc-seal"
            not in data[: data.find(b"\r\n\r\n") if b"\r\n\r\n" in data else None].lower()
        ):
            return "none"
        try:
            result, _, _ = dkim.arc_verify(data, dnsfunc=self._dkim_txt)
        except Exception:
            return "permerror"
        return result.decode("ascii", "replace") if isinstance(result, bytes) else str(result)

    def dmarc_policy(self, domain: str) -> dict[str, str] | str | None:
        """The tags of the DMARC record for ``domain`` (or its organizational domain), None
        when none is published, ``"temperror"`` when DNS failed."""
        for name in dict.fromkeys([domain, organizational_domain(domain)]):
            try:
                values = self._txt(f"_dmarc.{name}")
            except dns.exception.DNSException:
                return "temperror"
            records = [v for v in values if v.lower().startswith(b"v=dmarc1")]
            if len(records) == 1:
                text = records[0].decode("ascii", "replace")
                return {
                    k.strip().lower(): v.strip()
                    for k, _, v in (t.partition("=") for t in text.split(";"))
                    if k.strip()
                }
        return None

    def check(self, data: bytes, client_ip: str, mail_from: str, helo: str) -> Authentication:
        """Every result for ``data`` received from ``client_ip``, which said ``helo`` and gave
        ``mail_from`` (empty for the null sender)."""
        spf_result, spf_domain = self.check_spf(client_ip, mail_from, helo)
        dkim_result, dkim_domains = self.check_dkim(data)
        arc_result = self.check_arc(data)
        dmarc_result = self._dmarc(data, spf_result, spf_domain, dkim_domains)
        return Authentication(spf_result, dkim_result, dmarc_result, arc_result)

    def _dmarc(self, data: bytes, spf_result: str, spf_domain: str, dkim_domains: set[str]) -> str:
        header_end = data.find(b"\r\n\r\n")
        found = _FROM.findall(data[: header_end if header_end >= 0 else len(data)])
        if len(found) != 1:
            return "permerror"  # RFC 7489 6.6.1: one From, one author
        addresses = email.utils.getaddresses([found[0].decode("utf-8", "replace")])
        if len(addresses) != 1 or "@" not in addresses[0][1]:
            return "permerror"
        from_domain = addresses[0][1].rpartition("@")[2].lower().rstrip(">")
        policy = self.dmarc_policy(from_domain)
        if policy is None:
            return "none"
        if isinstance(policy, str):
            return policy
        aligned = _aligner(from_domain)
        spf_ok = spf_result == "pass" and aligned(spf_domain, policy.get("aspf", "r"))
        dkim_ok = any(aligned(d, policy.get("adkim", "r")) for d in dkim_domains)
        return "pass" if spf_ok or dkim_ok else "fail"


_SPF_LOOKUP_LOCK = threading.Lock()


def _aligner(from_domain: str) -> Callable[[str, str], bool]:
    def aligned(domain: str, mode: str) -> bool:
        if mode.lower() == "s":
            return domain == from_domain
        return organizational_domain(domain) == organizational_domain(from_domain)

    return aligned
