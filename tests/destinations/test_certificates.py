"""Which names a certificate covers (RFC 6125 section 6.4: a wildcard stands for exactly one
leftmost label; an address must be an IP address entry), with certificates a local CA issues."""

from __future__ import annotations

from pathlib import Path

from layang.destinations.certificates import names_match, wildcard_matches
from tests.support.tls_pki import LocalCA


def test_a_certificate_covers_its_names_its_wildcards_one_label_deep_and_its_addresses(
    tmp_path: Path,
):
    _, _, certificate = LocalCA(tmp_path / "ca").issue(
        "mx.example.test", "*.pool.example.test", "192.0.2.9"
    )
    covered = ["mx.example.test", "a.pool.example.test", "192.0.2.9"]
    not_covered = [
        "example.test",
        "a.mx.example.test",
        "pool.example.test",
        "a.b.pool.example.test",
        "192.0.2.10",
        "2001:db8::9",
    ]
    assert [host for host in covered + not_covered if names_match(certificate, host)] == covered


def test_wildcards_match_one_leftmost_label_whatever_the_case_and_final_dot():
    assert wildcard_matches("*.Example.NET.", "mx1.example.net")
    assert wildcard_matches("MX.example.net", "mx.EXAMPLE.net.")
    assert not wildcard_matches("*.example.net", ".example.net")
    assert not wildcard_matches("*.example.net", "a.b.example.net")
    assert not wildcard_matches("mx.*.net", "mx.example.net")
