"""``client.send(..., idempotency_key=…)`` against the live service."""

from __future__ import annotations

import pytest

from layang.client import LayangError
from layang.models import Transmission

SEND = {"from_": "shop@sender.test", "to": "ana@rcpt.test", "subject": "Hi", "body_text": "x"}


def test_a_send_repeated_with_its_key_is_stored_once(sdk):
    first = sdk.send(**SEND, idempotency_key="invoice-7")
    assert sdk.send(**SEND, idempotency_key="invoice-7") == first
    assert sdk.send(**SEND) != first != sdk.send(**SEND)
    assert Transmission.select().count() == 3
    with pytest.raises(LayangError) as reused:
        sdk.send(**{**SEND, "subject": "Other"}, idempotency_key="invoice-7")
    assert (reused.value.status, reused.value.error) == (422, "idempotency_key_reused")
