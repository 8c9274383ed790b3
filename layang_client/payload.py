"""Call arguments as the API's JSON: addresses, attachments, headers, ETags and timestamps,
and ``UNSET`` for a field left as it is."""

from __future__ import annotations

import base64
import email.utils
import enum
import mimetypes
import os
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TypeAlias

Address: TypeAlias = str | Mapping[str, str]
"""``"a@x.example"``, ``"Name <a@x.example>"`` or ``{"email": ..., "name": ...}``."""
Addresses: TypeAlias = Address | Iterable[Address]
Attachment: TypeAlias = (
    Mapping[str, Any] | str | os.PathLike[str] | tuple[str, bytes] | tuple[str, bytes, str]
)
Headers: TypeAlias = Mapping[str, str] | Iterable[tuple[str, str]]


class _Unset(enum.Enum):
    UNSET = enum.auto()


UNSET = _Unset.UNSET
"""Default of :meth:`Templates.update` fields: leave the field as it is (None removes it)."""


def _address(value: Address) -> dict[str, str]:
    if isinstance(value, Mapping):
        if "email" not in value:
            raise TypeError(f"an address mapping needs an 'email' key, got {dict(value)!r}")
        result = {"email": value["email"]}
        if value.get("name"):
            result["name"] = value["name"]
        return result
    if isinstance(value, str):
        name, addr = email.utils.parseaddr(value)
        # Anything parseaddr cannot read goes as given: the service names the bad field.
        result = {"email": addr or value.strip()}
        if name and addr:
            result["name"] = name
        return result
    raise TypeError(f"an address is a str or a mapping with 'email', not {type(value).__name__}")


def _addresses(value: Addresses) -> list[dict[str, str]]:
    if isinstance(value, str | Mapping):
        return [_address(value)]
    return [_address(item) for item in value]


Recipient: TypeAlias = Address | Mapping[str, Any]
"""A ``to`` recipient: an :data:`Address`, or ``{"email", "name"?, "substitution_data"?,
"metadata"?}``: that recipient's own data, merged over the send's for its copy alone."""
Recipients: TypeAlias = Recipient | Iterable[Recipient]


def _recipient(value: Recipient) -> dict[str, Any]:
    result: dict[str, Any] = dict(_address(value))
    if isinstance(value, Mapping):
        data = value.get("substitution_data", value.get("substitutionData"))
        if data is not None:
            result["substitutionData"] = dict(data)
        if value.get("metadata") is not None:
            result["metadata"] = dict(value["metadata"])
    return result


def _recipients(value: Recipients) -> list[dict[str, Any]]:
    if isinstance(value, str | Mapping):
        return [_recipient(value)]
    return [_recipient(item) for item in value]


def _guess_mime(filename: str) -> str:
    return mimetypes.guess_type(filename)[0] or "application/octet-stream"


def _b64(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else bytes(data)
    return base64.b64encode(raw).decode("ascii")


def _attachment(value: Attachment) -> dict[str, str]:
    if isinstance(value, Mapping):
        if "filename" not in value:
            raise TypeError("an attachment mapping needs a 'filename'")
        filename = str(value["filename"])
        mime = value.get("mimeType") or value.get("mime_type")
        if "content" in value:
            encoded = _b64(value["content"])
        elif "value" in value:
            encoded = str(value["value"])
        else:
            raise TypeError(f"attachment {filename!r} needs 'content' (bytes) or 'value' (Base64)")
        return {"filename": filename, "value": encoded, "mimeType": mime or _guess_mime(filename)}
    if isinstance(value, tuple):
        if len(value) not in (2, 3):
            raise TypeError("an attachment tuple is (filename, bytes) or (filename, bytes, mime)")
        filename, content = str(value[0]), value[1]
        mime = value[2] if len(value) == 3 else _guess_mime(filename)
        return {"filename": filename, "value": _b64(content), "mimeType": mime}
    if isinstance(value, str | os.PathLike):
        path = Path(value)
        return {
            "filename": path.name,
            "value": _b64(path.read_bytes()),
            "mimeType": _guess_mime(path.name),
        }
    raise TypeError(
        "an attachment is a path, a (filename, bytes[, mime]) tuple or a mapping, "
        f"not {type(value).__name__}"
    )


def _headers(value: Headers) -> list[dict[str, str]]:
    pairs = value.items() if isinstance(value, Mapping) else value
    return [{"name": str(name), "value": str(content)} for name, content in pairs]


def _quoted_etag(etag: str) -> str:
    etag = etag.strip()
    if etag == "*" or etag.startswith(('"', "W/")):
        return etag
    return f'"{etag}"'


def _timestamp(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else value
