"""Email addresses: validation, normalisation (international domains to IDNA) and header form."""

from __future__ import annotations

import re
from email.headerregistry import Address

from marshmallow import ValidationError

_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
LOCAL_PART = re.compile(
    rf"^(?:{_ATOM}(?:\.{_ATOM})*|\"(?:[\x20\x21\x23-\x5b\x5d-\x7e]|\\[\x20-\x7e])*\")$"
)
LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def normalize_address(value: str) -> str:
    """``local@domain`` with the domain lower-cased and IDNA-encoded.

    Raises ``marshmallow.ValidationError`` naming what is wrong.
    """
    value = value.strip()
    local, at, domain = value.rpartition("@")
    if not at or not local or not domain:
        raise ValidationError("Not a valid email address.")
    if not LOCAL_PART.match(local) or len(local) > 64:
        raise ValidationError("Not a valid email address.")
    try:
        ascii_domain = domain.rstrip(".").encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValidationError("Not a valid email address: bad domain.") from None
    labels = ascii_domain.split(".")
    if len(labels) < 2 or not all(LABEL.match(label) for label in labels) or labels[-1].isdigit():
        raise ValidationError("Not a valid email address: bad domain.")
    address = f"{local}@{ascii_domain}"
    if len(address) > 254:
        raise ValidationError("Not a valid email address: too long.")
    return address


def header_address(email: str, name: str | None = None) -> Address:
    """An ``email.headerregistry.Address`` for a normalised address (name encoded as needed)."""
    local, _, domain = email.rpartition("@")
    if local.startswith('"'):
        # Address quotes the user name itself when needed; give it the unquoted form.
        local = re.sub(r"\\(.)", r"\1", local[1:-1])
    return Address(display_name=name or "", username=local, domain=domain)


def domain_of(email: str) -> str:
    return email.rpartition("@")[2]
