"""Fixtures for the compatibility suite: Mailtarget's published client libraries pointed at a
live Layang, and what reached the upstream SMTP server."""

from __future__ import annotations

import base64
import email
import email.policy
import re
from collections.abc import Iterator
from email.message import EmailMessage

import mailtarget_sdk
import pytest

from layang.client import Layang
from tests.support.upstream import Received, Upstream

# A 1x1 PNG, the kind of image an HTML body shows inline.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@pytest.fixture
def layang(live_server: str, api_key: str) -> Iterator[Layang]:
    """Layang's own SDK on the same account, to set up templates and read records back."""
    with Layang(api_key, base_url=live_server, retry_backoff=0.01) as client:
        yield client


@pytest.fixture
def mailtarget(live_server: str, api_key: str) -> mailtarget_sdk.MailtargetClient:
    """The published Python SDK, unchanged, sending to the live service.

    It has no base URL argument: its ``Layang`` reads the class attribute ``APIBase``, which an
    instance attribute overrides. That one assignment is the whole change a user makes.
    """
    client = mailtarget_sdk.MailtargetClient(api_key)
    client.layang.APIBase = live_server
    return client


def received_by(upstream: Upstream, address: str) -> Received:
    """The last message the upstream accepted for ``address``."""
    for received in reversed(upstream.received):
        if address in received.rcpt_tos:
            return received
    raise AssertionError(f"nothing for {address}: {[r.rcpt_tos for r in upstream.received]}")


def parsed(received: Received) -> EmailMessage:
    """The bytes as a mail reader sees them, after checking they are well-formed wire data:
    7-bit, CRLF only, no line over 998 octets, no parser defects."""
    raw = received.data
    assert raw.isascii()
    assert b"\n" not in raw.replace(b"\r\n", b"") and b"\r" not in raw.replace(b"\r\n", b"")
    assert max(map(len, raw.split(b"\r\n"))) <= 998
    message = email.message_from_bytes(raw, policy=email.policy.default)
    assert isinstance(message, EmailMessage)
    assert not [d for part in message.walk() for d in part.defects]
    return message


def structure(message: EmailMessage) -> list[str]:
    """The tree of content types, depth first, each indented by its depth."""
    out: list[str] = []

    def visit(part: EmailMessage, depth: int) -> None:
        out.append("  " * depth + part.get_content_type())
        if part.is_multipart():
            for child in part.get_payload():
                visit(child, depth + 1)

    visit(message, 0)
    return out


def cid_targets(message: EmailMessage) -> dict[str, bytes]:
    """Every ``cid:`` URL of the HTML, resolved the way a mail reader does it: to a part of the
    multipart/related the HTML is in. Fails when one does not resolve."""
    html = message.get_body(("html",))
    assert html is not None
    related = next(
        part
        for part in message.walk()
        if part.get_content_type() == "multipart/related" and html in part.get_payload()
    )
    by_id = {
        part["Content-ID"][1:-1]: part.get_payload(decode=True)
        for part in related.get_payload()
        if part["Content-ID"]
    }
    return {cid: by_id[cid] for cid in re.findall(r'cid:([^"\'\s>]+)', html.get_content())}


def text_of(message: EmailMessage, subtype: str) -> str | None:
    body = message.get_body((subtype,))
    return None if body is None else body.get_content().replace("\r\n", "\n")
