"""Every test here runs on the session's PostgreSQL database (see ``server.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from layang.api.transmissions import TransmissionRequestSchema
from layang.config import Config
from layang.db import database
from layang.domain.intake import accept_transmission
from layang.models import Account


@pytest.fixture
def backend() -> str:
    return "postgresql"


@pytest.fixture
def queue_many(config: Config, account: Account) -> Callable[..., list[str]]:
    """Queue ``count`` one-recipient messages with subjects ``<prefix><n>``, all in one commit,
    so that every worker already running sees the whole lot at once."""

    def queue(count: int, prefix: str = "m") -> list[str]:
        with database.atomic():
            return [
                accept_transmission(
                    account,
                    TransmissionRequestSchema().load(
                        {
                            "from": {"email": "shop@sender.test"},
                            "subject": f"{prefix}{n}",
                            "to": [{"email": f"r{n}@rcpt.test"}],
                            "bodyText": "hello",
                        }
                    ),
                    config,
                ).transmission_id
                for n in range(count)
            ]

    return queue
