"""The suppression list through the SDK, on the live service."""

from __future__ import annotations

import pytest

from layang.client import NotFoundError, ValidationError
from tests.client.conftest import delivered_to
from tests.conftest import drain


def test_suppressions_lifecycle(sdk):
    for n in range(5):
        sdk.suppressions.add(f"user{n}@shop.example", note=f"n{n}")
    entry = sdk.suppressions.put("odd/one@other.example", reason="unsubscribe")
    assert entry["email"] == "odd/one@other.example" and entry["reason"] == "unsubscribe"
    assert sdk.suppressions.get("odd/one@other.example") == entry  # "/" stays in one segment

    everything = list(sdk.suppressions.list(page_size=2))  # three pages, followed
    assert len(everything) == 6 and everything[0] == entry
    assert [e["email"] for e in sdk.suppressions.list(email="user3")] == ["user3@shop.example"]
    assert [e["email"] for e in sdk.suppressions.list(reason="unsubscribe")] == [entry["email"]]

    sdk.suppressions.delete("USER3@shop.example")
    with pytest.raises(NotFoundError):
        sdk.suppressions.get("user3@shop.example")
    with pytest.raises(NotFoundError):
        sdk.suppressions.delete("user3@shop.example")
    with pytest.raises(ValidationError) as invalid:
        sdk.suppressions.add("ana@example.org", reason="complaint")
    assert invalid.value.errors == {"reason": ["Must be one of: manual, unsubscribe."]}


def test_send_skips_suppressed_recipients(sdk, upstream, relay_to):
    sdk.suppressions.add("news-averse@rcpt.example", reason="unsubscribe")
    for transactional in (True, False):
        sdk.send(
            from_="shop@shop.example",
            to=["ana@rcpt.example", "news-averse@rcpt.example"],
            subject=f"transactional={transactional}",
            body_text="Hi",
            transactional=transactional,
        )
    drain(relay_to(upstream))
    assert delivered_to(upstream, "news-averse@rcpt.example")["Subject"] == "transactional=True"
    news = delivered_to(upstream, "ana@rcpt.example")
    assert news["Subject"] == "transactional=False" and news["List-Unsubscribe-Post"]
    statuses = sorted(r["status"] for r in sdk.activity.list(recipient="news-averse@rcpt.example"))
    assert statuses == ["Delivery", "Suppressed"]
