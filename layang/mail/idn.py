"""Internationalized domain names: IDNA 2008 (RFC 5890 to 5893) with the UTS #46 mapping, by the
``idna`` package, never Python's own ``idna`` codec (IDNA 2003, which maps ``faß.de`` to
``fass.de``, another owner's domain).

Every domain Layang takes (recipients, senders, address headers, sending domains, MX look-ups)
is turned into its ASCII form (A-labels, lower case) here, once, where it comes in; stored,
compared (suppressions, sandbox recipients) and looked up in that form; shown to people in its
Unicode form (U-labels, :func:`to_unicode`).

An ASCII label that is not an A-label (``xn--…``) is kept as it is, lower-cased: host names of
letters, digits and hyphens need no IDNA, and the callers check their own rules for them.
"""

from __future__ import annotations

import contextlib

import idna

ACE_PREFIX = "xn--"


class InvalidDomain(ValueError):
    """A name that IDNA 2008 refuses; the text says which label and why."""


def to_ascii(domain: str) -> str:
    """``domain`` (any case, U-labels or A-labels, a final dot or not) as lower-case A-labels
    joined by dots, without a final dot: ``Faß.DE.`` → ``xn--fa-hia.de``.

    Non-ASCII labels are mapped by UTS #46 (non-transitional: ``ß`` stays ``ß``) and encoded
    by IDNA 2008; an ``xn--`` label must decode to a valid U-label. Raises
    :class:`InvalidDomain` otherwise (an empty label, a code point IDNA 2008 disallows, a
    label over 63 octets once encoded, a bad A-label)."""
    name = domain.strip()
    if name.isascii() and ACE_PREFIX not in name.lower():
        return name.rstrip(".").lower()
    try:
        mapped = idna.uts46_remap(name, std3_rules=True, transitional=False)
    except idna.IDNAError as error:
        raise InvalidDomain(f"{domain!r} is not a valid domain name (IDNA 2008): {error}") from None
    labels = mapped.rstrip(".").split(".")
    encoded = []
    for label in labels:
        if not label:
            raise InvalidDomain(f"{domain!r} is not a valid domain name (IDNA 2008): empty label")
        if label.isascii() and not label.startswith(ACE_PREFIX):
            encoded.append(label)
            continue
        try:
            if label.startswith(ACE_PREFIX):
                idna.ulabel(label)  # an A-label must decode to a valid U-label
                encoded.append(label)
            else:
                encoded.append(idna.alabel(label).decode("ascii"))
        except (idna.IDNAError, UnicodeError) as error:
            raise InvalidDomain(
                f"{domain!r} is not a valid domain name (IDNA 2008): {error}"
            ) from None
    return ".".join(encoded)


def to_unicode(domain: str) -> str:
    """``domain`` with each A-label shown as its U-label (``xn--fa-hia.de`` → ``faß.de``), for
    people to read; a label that does not decode is left as it is. Never raises."""
    labels = []
    for label in domain.split("."):
        if label.lower().startswith(ACE_PREFIX):
            with contextlib.suppress(idna.IDNAError, UnicodeError):
                label = idna.ulabel(label.lower())
        labels.append(label)
    return ".".join(labels)


def display_form(value: str) -> str:
    """An address (``local@domain``) or a domain name as people read it: the domain's A-labels
    as U-labels (:func:`to_unicode`), the local part as it is."""
    local, at, domain = value.rpartition("@")
    return f"{local}{at}{to_unicode(domain)}"
