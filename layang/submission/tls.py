"""The STARTTLS certificate: the configured pair, or a self-signed one made once."""

from __future__ import annotations

import datetime
import ipaddress
import os
import socket
import ssl
from pathlib import Path

from layang.config import Config


def _generate(cert_path: Path, key_path: Path, hostname: str) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hostname)])
    now = datetime.datetime.now(datetime.UTC)
    names = [
        x509.DNSName(hostname),
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=825))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_bytes = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key_bytes)
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))


def certificate_files(config: Config) -> tuple[Path, Path]:
    """(certificate, key) paths: the configured ones, or a self-signed pair in the data dir,
    generated on first use."""
    if config.smtp_tls_cert and config.smtp_tls_key:
        return Path(config.smtp_tls_cert), Path(config.smtp_tls_key)
    cert_path = config.data_dir / "smtp-tls.crt"
    key_path = config.data_dir / "smtp-tls.key"
    if not (cert_path.exists() and key_path.exists()):
        _generate(cert_path, key_path, socket.gethostname())
    return cert_path, key_path


def server_tls_context(config: Config) -> ssl.SSLContext:
    cert_path, key_path = certificate_files(config)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_path, key_path)
    return context
