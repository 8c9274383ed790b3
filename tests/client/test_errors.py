"""Every error the live service answers arrives as the right LayangError, with its body."""

from __future__ import annotations

import socket

import httpx
import pytest

from layang.client import (
    AuthenticationError,
    Layang,
    LayangConnectionError,
    LayangError,
    NotFoundError,
    ValidationError,
)


def test_unknown_key_is_401(live_server):
    with (
        Layang("lyg_not-a-key", base_url=live_server) as sdk,
        pytest.raises(AuthenticationError) as failed,
    ):
        sdk.transmissions.get("tx")
    error = failed.value
    assert isinstance(error, LayangError)
    assert error.status == 401 and error.error == "unauthorized"
    assert error.message == "The API key is unknown or revoked."
    assert error.to_dict() == {"error": "unauthorized", "message": error.message, "status": 401}
    assert str(error) == "401 unauthorized: The API key is unknown or revoked."


def test_validation_names_the_field(sdk):
    with pytest.raises(ValidationError) as failed:
        sdk.send(
            from_="shop@shop.example",
            to=["ana@rcpt.example", "not an address"],
            subject="x",
            body_text="x",
        )
    error = failed.value
    assert error.status == 400 and error.error == "validation_failed"
    assert error.message.startswith("to.1.email:")
    assert list(error.errors) == ["to"] and list(error.errors["to"]) == ["1"]
    assert error.errors["to"]["1"]["email"]

    with pytest.raises(ValidationError) as missing:
        sdk.send(from_="shop@shop.example", to="ana@rcpt.example", body_text="x")
    assert missing.value.message.startswith("subject:") and "subject" in missing.value.errors

    with pytest.raises(ValidationError) as header:
        sdk.send(
            from_="shop@shop.example",
            to="a@rcpt.example",
            subject="x",
            body_text="x",
            headers={"Bcc": "e@x.example"},
        )
    assert header.value.message.startswith("headers.0.name:")


def test_unknown_transmission_is_404(sdk):
    with pytest.raises(NotFoundError) as failed:
        sdk.transmissions.get("01jzzzzzzzzzzzzzzzzzzzzzzz")
    assert failed.value.status == 404 and failed.value.error == "not_found"
    # An id cannot step out of its path segment.
    with pytest.raises(NotFoundError):
        sdk.transmissions.get("../activity")


def test_connection_refused(api_key):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nothing listens there
    attempts: list[httpx.Request] = []
    with (
        httpx.Client(event_hooks={"request": [attempts.append]}) as http,
        Layang(
            api_key,
            base_url=f"http://127.0.0.1:{port}",
            http_client=http,
            max_retries=2,
            retry_backoff=0.01,
        ) as sdk,
    ):
        with pytest.raises(LayangConnectionError) as failed:
            sdk.transmissions.get("tx")
        assert failed.value.status is None and failed.value.error == "connection_error"
        assert f"127.0.0.1:{port}" in failed.value.message
        assert len(attempts) == 3
        # Refused before anything was sent: even a send is retried.
        attempts.clear()
        with pytest.raises(LayangConnectionError):
            sdk.send(from_="shop@shop.example", to="a@rcpt.example", subject="x", body_text="x")
        assert len(attempts) == 3


def test_configuration_errors(monkeypatch):
    monkeypatch.delenv("LAYANG_API_KEY", raising=False)
    monkeypatch.delenv("LAYANG_KEY", raising=False)
    with pytest.raises(ValueError, match="API key"):
        Layang()
    monkeypatch.setenv("LAYANG_KEY", "lyg_other_name")  # the name `layang run` once printed
    with Layang() as sdk:
        assert sdk._api_key == "lyg_other_name"
    monkeypatch.setenv("LAYANG_API_KEY", "lyg_env")
    monkeypatch.setenv("LAYANG_BASE_URL", "http://mail.example:9000/")
    with Layang() as sdk:
        assert sdk.base_url == "http://mail.example:9000"
        with pytest.raises(TypeError):
            sdk.send(from_="a@x.example", to=42, subject="x", body_text="x")
        with pytest.raises(ValueError):
            sdk.templates.get("")
