"""Domain names by IDNA 2008 with the UTS #46 mapping (RFC 5891, UTS #46), never IDNA 2003."""

# ruff: noqa: RUF001 - look-alike letters are what these tests are about
from __future__ import annotations

import pytest

from layang.mail.idn import InvalidDomain, display_form, to_ascii, to_unicode
from layang.mail.message import InvalidAddress, normalize_address


@pytest.mark.parametrize(
    ("given", "ascii_form"),
    [
        ("faß.de", "xn--fa-hia.de"),  # IDNA 2003 would give fass.de, another domain
        ("FASS.de", "fass.de"),
        ("Faß.DE.", "xn--fa-hia.de"),
        ("xn--fa-hia.de", "xn--fa-hia.de"),
        ("XN--FA-HIA.de", "xn--fa-hia.de"),
        ("bücher.example", "xn--bcher-kva.example"),
        ("ＥＸＡＭＰＬＥ．com", "example.com"),  # full-width letters and dot, mapped
        ("ශ්‍රී.lk", "xn--10cl1a0b660p.lk"),  # a ZERO WIDTH JOINER that CONTEXTJ allows
        ("mail.example.org", "mail.example.org"),
    ],
)
def test_names_are_encoded_by_idna_2008_with_uts46(given, ascii_form):
    assert to_ascii(given) == ascii_form


@pytest.mark.parametrize(
    "given",
    ["☃.com", "xn--n3h.com", "xn--zz.de", "ü..de", "-bü.de", "x" * 60 + "ü.de", "ab\u200d.de"],
)
def test_names_idna_2008_refuses_are_refused_with_the_reason(given):
    with pytest.raises(InvalidDomain, match="not a valid domain name"):
        to_ascii(given)
    with pytest.raises(InvalidAddress, match="IDNA 2008"):
        normalize_address(f"kunde@{given}")


def test_deviation_characters_are_kept_not_mapped_as_idna_2003_did():
    # UTS #46 non-transitional: ß, final sigma and ZWJ/ZWNJ stay themselves.
    assert to_ascii("ας.gr") != to_ascii("ασ.gr")
    assert to_ascii("faß.de") != to_ascii("fass.de")
    assert to_unicode(to_ascii("ας.gr")) == "ας.gr"


def test_addresses_keep_their_local_part_and_are_shown_with_u_labels():
    assert normalize_address("Kunde@Faß.de") == "Kunde@xn--fa-hia.de"
    assert to_unicode("mx.xn--fa-hia.de") == "mx.faß.de"
    assert to_unicode("xn--zz.de") == "xn--zz.de"  # undecodable: as it is
    assert display_form("kunde@xn--bcher-kva.example") == "kunde@bücher.example"
    assert display_form("xn--fa-hia.de") == "faß.de"
