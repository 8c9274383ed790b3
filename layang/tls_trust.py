"""Whom Layang trusts when it speaks TLS as a client: the system's CAs, plus the private ones
of ``LAYANG_TLS_CAFILE``.

Every client session uses these: the smarthost relay, MX hosts, MTA-STS policy fetches and
webhooks (``httpx.Client(verify=client_ssl_context(config.tls_cafile))``).
"""

from __future__ import annotations

import functools
import re
import ssl
import warnings
from pathlib import Path

from cryptography import x509


def client_ssl_context(cafile: str | None = None, *, verify: bool = True) -> ssl.SSLContext:
    """A client context trusting the system CAs and those in ``cafile`` (PEM), checking the
    server's name; ``verify=False`` encrypts without checking anything (opportunistic TLS).

    Raises ``OSError`` or ``ssl.SSLError`` when ``cafile`` cannot be loaded.
    """
    context = ssl.create_default_context()
    if cafile:
        context.load_verify_locations(cafile=cafile)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


@functools.lru_cache(maxsize=8)
def trusted_roots(cafile: str | None = None) -> tuple[x509.Certificate, ...]:
    """The CA certificates ``client_ssl_context`` trusts, parsed: what a certificate chain
    seen without verification (opportunistic sessions) is checked against afterwards."""
    pems: list[bytes] = []
    paths = ssl.get_default_verify_paths()
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and Path(candidate).is_file():
            pems.append(Path(candidate).read_bytes())
            break
    if cafile:
        pems.append(Path(cafile).read_bytes())
    roots: list[x509.Certificate] = []
    for pem in pems:
        for block in _PEM_BLOCK.findall(pem):
            # A few old roots in system bundles break RFC 5280 (negative serial numbers):
            # cryptography warns about them, and they are no loss to skip.
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                try:
                    roots.append(x509.load_pem_x509_certificate(block))
                except (ValueError, Warning):
                    continue
    return tuple(roots)


_PEM_BLOCK = re.compile(
    rb"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----", re.DOTALL
)
