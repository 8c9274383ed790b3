"""Fixtures of the transport security tests."""

from tests.destinations.transport import world  # noqa: F401 - fixture
