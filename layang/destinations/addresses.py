"""Which network addresses Layang connects to on someone else's say-so: the one rule for every
host a customer or a recipient domain names (webhook endpoints, MX hosts, MTA-STS policy hosts,
TLS-RPT ``https:`` endpoints; docs/api.md "Webhooks", docs/delivery.md "Transport security").

Public addresses only: never loopback, unspecified (``0.0.0.0``, ``::``), private (RFC 1918,
ULA ``fc00::/7``), shared (CGNAT), link-local, multicast or reserved ones, judging an IPv6
address that carries an IPv4 one (mapped, NAT64, 6to4) by that IPv4 address. Allowing private
networks (``LAYANG_WEBHOOK_ALLOW_PRIVATE``, ``LAYANG_MX_ALLOW_PRIVATE``: tests, private
deployments) lifts all of that but link-local IPv4 and the cloud metadata services, which are
never a destination.

A name is resolved, checked and then connected to by the very address checked, so that it cannot
be re-pointed between the check and the connection. What a refusal says never names the
address: a customer must not learn from it where internal names point.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Iterable, Sequence

import dns.asyncresolver
import dns.exception
import dns.resolver

from layang.destinations.dns import async_resolver

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services: never a destination, not even with private addresses allowed, nor is
# any IPv4 link-local address (where such services live).
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",
        "169.254.170.2",
        "fd00:ec2::254",
        "100.100.100.200",
        "168.63.129.16",
    )
)
_LINK_LOCAL_V4 = ipaddress.ip_network("169.254.0.0/16")
_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
REFUSED_ADDRESS = "a private address"
"""What a refusal says of a refused address: never the address itself."""
# A host whose last label is a number is read as an IPv4 address by URL parsers (WHATWG) and
# resolvers alike, in forms such as 2130706433, 0x7f.1, 127.1 or 0177.0.0.1.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)


def embedded_ipv4(address: IpAddress) -> IpAddress:
    """The IPv4 address an IPv6 address stands for (IPv4-mapped, NAT64, 6to4), else itself."""
    if isinstance(address, ipaddress.IPv4Address):
        return address
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _NAT64):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return address


def address_refusal(address: IpAddress | str, allow_private: bool) -> str | None:
    """Why Layang may not connect to ``address`` (an IP address or its text), as a phrase
    such as ``"a loopback address"``, or None when it may. Text that is not an IP address is
    refused (``"not an IP address"``)."""
    if isinstance(address, str):
        try:
            address = ipaddress.ip_address(address.partition("%")[0])
        except ValueError:
            return "not an IP address"
    address = embedded_ipv4(address)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if allow_private:
        return "a link-local address" if address in _LINK_LOCAL_V4 else None
    for refused, name in (
        (address.is_loopback, "a loopback address"),
        (address.is_unspecified, "an unspecified address"),
        (address.is_link_local, "a link-local address"),
        (address.is_multicast, "a multicast address"),
        (address in _CGNAT, "a shared (CGNAT) address"),
        (address.is_reserved, "a reserved address"),
        (address.is_private, "a private address"),
        (not address.is_global, "not a public address"),
    ):
        if refused:
            return name
    return None


def allowed_addresses(addresses: Iterable[str], allow_private: bool) -> tuple[str, ...]:
    """Those of ``addresses`` (IP address texts) Layang may connect to, in their order."""
    return tuple(a for a in addresses if address_refusal(a, allow_private) is None)


def numeric_ipv4_form(host: str) -> bool:
    """Whether ``host`` is a name that URL parsers and resolvers read as an IPv4 address
    (its last label a number: ``2130706433``, ``0x7f.1``, ``127.1``)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return bool(_NUMERIC_LABEL.match(host.rstrip(".").rpartition(".")[2]))
    return False


def host_refusal(host: str, allow_private: bool) -> str | None:
    """Why a host as written (a name or an address literal, as in a URL) cannot be connected
    to whatever it resolves to, or None: an address refused by :func:`address_refusal`, a
    numeric IPv4 form other than four decimal numbers, a ``localhost`` name. Names are checked
    again when resolved."""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        if numeric_ipv4_form(host):
            return f"{host} is a numeric form of an IPv4 address"
        if not allow_private and (host == "localhost" or host.endswith(".localhost")):
            return f"{host} is a loopback name"
        return None
    refusal = address_refusal(address, allow_private)
    return None if refusal is None else f"{host} is {refusal}"


class Refused(Exception):
    """A host may not be connected to now: it resolves to a refused address, or does not
    resolve. The text never names a refused address."""


class Resolver:
    """Resolves host names to connect to: at ``servers`` (``LAYANG_DNS_RESOLVER``) when
    given, else with the system's resolver; never cached, so every connection checks what the
    name points at now."""

    def __init__(self, servers: Sequence[tuple[str, int]] = (), timeout: float = 5.0) -> None:
        self.dns: dns.asyncresolver.Resolver | None = None
        if servers:
            self.dns = async_resolver(servers, timeout=timeout)

    async def addresses(self, host: str, port: int) -> list[IpAddress]:
        """Every address ``host`` resolves to, in order. Raises :class:`Refused`."""
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        if self.dns is None:
            try:
                infos = await asyncio.get_running_loop().getaddrinfo(
                    host, port, type=socket.SOCK_STREAM
                )
            except (OSError, UnicodeError) as error:
                raise Refused(f"could not resolve {host}: {error}") from None
            found = [ipaddress.ip_address(info[4][0]) for info in infos]
        else:
            answers = await asyncio.gather(*(self._query(host, rdtype) for rdtype in ("A", "AAAA")))
            found = [address for answer in answers for address in answer]
        return list(dict.fromkeys(found))

    async def _query(self, host: str, rdtype: str) -> list[IpAddress]:
        assert self.dns is not None
        try:
            answer = await self.dns.resolve(host, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN:
            raise Refused(f"could not resolve {host}: no such name") from None
        except dns.exception.DNSException as error:
            raise Refused(f"could not resolve {host}: {error}") from None
        return [ipaddress.ip_address(record.to_text()) for record in answer.rrset or ()]


def checked(host: str, addresses: Sequence[IpAddress], allow_private: bool) -> IpAddress:
    """The address to connect to for ``host`` among ``addresses`` (all it resolves to): every
    one must be allowed, as one refused address refuses the host (a name serving both is not
    trusted). Raises :class:`Refused`, whose text never names a refused address."""
    if not addresses:
        raise Refused(f"{host} has no address")
    if any(address_refusal(address, allow_private) for address in addresses):
        raise Refused(f"{host} resolves to {REFUSED_ADDRESS}")
    return addresses[0]


async def resolve(host: str, port: int, allow_private: bool, resolver: Resolver) -> IpAddress:
    """The address to connect to for ``host`` (see :func:`checked`), looked up now through
    ``resolver``. Raises :class:`Refused`."""
    return checked(host, await resolver.addresses(host, port), allow_private)


def resolve_blocking(host: str, allow_private: bool, resolver: dns.resolver.Resolver) -> IpAddress:
    """:func:`resolve` for code off the event loop, through a blocking ``resolver`` (A, then
    AAAA records). Raises :class:`Refused`."""
    try:
        return checked(host, [ipaddress.ip_address(host.strip("[]"))], allow_private)
    except ValueError:
        pass
    found: list[IpAddress] = []
    for rdtype in ("A", "AAAA"):
        try:
            answer = resolver.resolve(host, rdtype, raise_on_no_answer=False, search=False)
        except dns.resolver.NXDOMAIN:
            raise Refused(f"could not resolve {host}: no such name") from None
        except (dns.exception.DNSException, OSError) as error:
            raise Refused(f"could not resolve {host}: {error}") from None
        found.extend(ipaddress.ip_address(record.to_text()) for record in answer.rrset or ())
    return checked(host, list(dict.fromkeys(found)), allow_private)
