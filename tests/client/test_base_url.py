"""Where the SDK goes when not told: $LAYANG_BASE_URL, else the service at $LAYANG_HTTP_BIND,
else http://127.0.0.1:8000."""

from __future__ import annotations

from layang.client import Layang, default_base_url


def test_the_base_url_comes_from_the_environment_in_order():
    assert default_base_url({}) == "http://127.0.0.1:8000"
    assert default_base_url({"LAYANG_HTTP_BIND": "127.0.0.1:9000"}) == "http://127.0.0.1:9000"
    assert default_base_url({"LAYANG_HTTP_BIND": "0.0.0.0:9000"}) == "http://127.0.0.1:9000"
    assert default_base_url({"LAYANG_HTTP_BIND": ":9000"}) == "http://127.0.0.1:9000"
    assert default_base_url({"LAYANG_HTTP_BIND": "[::]:9001"}) == "http://127.0.0.1:9001"
    assert default_base_url({"LAYANG_HTTP_BIND": "[::1]:9001"}) == "http://[::1]:9001"
    both = {"LAYANG_BASE_URL": "https://mail.example.com", "LAYANG_HTTP_BIND": "0.0.0.0:80"}
    assert default_base_url(both) == "https://mail.example.com"


def test_a_client_without_base_url_reaches_the_service_at_layang_http_bind(
    live_server, api_key, monkeypatch
):
    monkeypatch.delenv("LAYANG_BASE_URL", raising=False)
    monkeypatch.setenv("LAYANG_HTTP_BIND", live_server.removeprefix("http://"))
    with Layang(api_key) as client:
        assert client.base_url == live_server
        assert list(client.templates.list()) == []
    monkeypatch.setenv("LAYANG_BASE_URL", live_server + "/")
    monkeypatch.setenv("LAYANG_HTTP_BIND", "127.0.0.1:1")
    with Layang(api_key) as client:
        assert client.base_url == live_server
