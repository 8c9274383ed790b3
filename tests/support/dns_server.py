"""A real DNS server for the tests: dnslib's server on 127.0.0.1 and an ephemeral UDP/TCP port,
answering from a zone the test fills in. Names can be made to fail (SERVFAIL) or to go
unanswered (the client times out), as broken DNS does."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pytest
from dnslib import AAAA, CNAME, MX, PTR, QTYPE, RCODE, RR, TLSA, TXT, A, DNSError, DNSRecord
from dnslib.server import BaseResolver, DNSLogger, DNSServer


def _name(name: str) -> str:
    return name.lower().rstrip(".")


def txt_strings(value: str) -> list[bytes]:
    """A TXT value as a zone file holds it: 255-byte strings, joined again by resolvers."""
    data = value.encode()
    return [data[i : i + 255] for i in range(0, len(data), 255)] or [b""]


class Zone(BaseResolver):
    """The records served, by (name, type), and the names that fail."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], list[Any]] = {}
        self.servfail: set[str] = set()
        self.silent: set[str] = set()
        self.queries: list[tuple[str, str]] = []
        self.ttls: dict[tuple[str, str], int] = {}
        # Answers carry the AD bit, as a DNSSEC-validating resolver's do for a signed zone.
        self.authenticated = False

    def add_txt(self, name: str, value: str) -> None:
        self.records.setdefault((_name(name), "TXT"), []).append(TXT(txt_strings(value)))

    def add_mx(self, name: str, preference: int, host: str) -> None:
        self.records.setdefault((_name(name), "MX"), []).append(MX(host, preference))

    def add_a(self, name: str, *addresses: str, ttl: int | None = None) -> None:
        self.records.setdefault((_name(name), "A"), []).extend(A(a) for a in addresses)
        if ttl is not None:
            self.ttls[(_name(name), "A")] = ttl

    def add_aaaa(self, name: str, *addresses: str, ttl: int | None = None) -> None:
        self.records.setdefault((_name(name), "AAAA"), []).extend(AAAA(a) for a in addresses)
        if ttl is not None:
            self.ttls[(_name(name), "AAAA")] = ttl

    def add_cname(self, name: str, target: str) -> None:
        self.records.setdefault((_name(name), "CNAME"), []).append(CNAME(target))

    def add_null_mx(self, name: str) -> None:
        """``0 .``: the domain accepts no mail (RFC 7505)."""
        self.add_mx(name, 0, ".")

    def add_tlsa(self, name: str, usage: int, selector: int, mtype: int, data: bytes) -> None:
        self.records.setdefault((_name(name), "TLSA"), []).append(
            TLSA(usage, selector, mtype, data)
        )

    def set_ttl(self, name: str, rtype: str, ttl: int) -> None:
        self.ttls[(_name(name), rtype)] = ttl

    def exists(self, name: str) -> None:
        """Make ``name`` exist with no records of any type asked (NOERROR, no data)."""
        self.records.setdefault((_name(name), "NONE"), [])

    def add_address(self, name: str, address: str) -> None:
        """An A record, or AAAA for an IPv6 address."""
        rtype, rdata = ("AAAA", AAAA(address)) if ":" in address else ("A", A(address))
        self.records.setdefault((_name(name), rtype), []).append(rdata)

    def add_ptr(self, address: str, host: str) -> None:
        """The reverse record of ``address`` (an IPv4 or IPv6 address), naming ``host``."""
        import ipaddress

        name = ipaddress.ip_address(address).reverse_pointer
        self.records.setdefault((_name(name), "PTR"), []).append(PTR(host))

    def remove(self, name: str, rtype: str | None = None) -> None:
        for key in list(self.records):
            if key[0] == _name(name) and rtype in (None, key[1]):
                del self.records[key]

    def publish(self, records: Iterable[Mapping[str, str]]) -> None:
        """Publish records as the API lists them (``{"type", "name", "value"}``)."""
        for record in records:
            if record["type"] == "TXT":
                self.add_txt(record["name"], record["value"])
            elif record["type"] == "MX":
                preference, host = record["value"].split()
                self.add_mx(record["name"], int(preference), host)
            elif record["type"] == "CNAME":
                self.add_cname(record["name"], record["value"])
            else:
                raise AssertionError(f"cannot publish {record['type']}")

    def resolve(self, request: DNSRecord, handler: Any) -> DNSRecord:
        name = _name(str(request.q.qname))
        qtype = QTYPE[request.q.qtype]
        self.queries.append((name, qtype))
        if name in self.silent:
            raise DNSError("no answer, on purpose")  # dnslib then sends nothing
        reply = request.reply()
        reply.header.ad = int(self.authenticated)
        if name in self.servfail:
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        for rdata in self.records.get((name, qtype), []):
            ttl = self.ttls.get((name, qtype), 60)
            reply.add_answer(RR(request.q.qname, request.q.qtype, rdata=rdata, ttl=ttl))
        if not reply.rr and not any(key[0] == name for key in self.records):
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class QuietLogger(DNSLogger):
    def __init__(self) -> None:
        super().__init__(log="-recv,-send,-request,-reply,-truncated,-error,-data", prefix=False)


@pytest.fixture
def dns_zone() -> Iterator[Zone]:
    """A running DNS server; ``zone.address`` is its ``127.0.0.1:port``."""
    zone = Zone()
    for _ in range(5):
        port = _free_port()
        try:
            server = DNSServer(zone, address="127.0.0.1", port=port, logger=QuietLogger())
            break
        except OSError:
            continue
    else:
        raise AssertionError("no free port for the DNS server")
    server.start_thread()
    zone.address = f"127.0.0.1:{port}"  # type: ignore[attr-defined]
    yield zone
    server.stop()
    server.server.server_close()
