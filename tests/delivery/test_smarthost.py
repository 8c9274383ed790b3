"""The relay URL (``LAYANG_RELAY_URL``, see docs/configuration.md): what each form means, and
every malformed one refused without leaking its password."""

from __future__ import annotations

import pytest

from layang.delivery.smarthost import RelayConfigError, Smarthost, redact_url, relay_from_url
from tests.support.upstream import make_self_signed_cert


@pytest.fixture
def certificate(tmp_path):
    return make_self_signed_cert(tmp_path / "cert")


@pytest.mark.parametrize(
    "url",
    [
        "",
        "mail.example.com:25",
        "http://mail.example.com",
        "smtp:mail.example.com",
        "smtp://",
        "smtp://:25",
        "smtp://mail.example.com:99999",
        "smtp://mail.example.com:port",
        "smtp://mail.example.com/path",
        "smtp://mail.example.com?tls=on",
        "smtp://mail.example.com?tls=",
        "smtp://mail.example.com?tsl=off",
        "smtp://mail.example.com?tls=off&tls=required",
        "smtp://mail.example.com?cafile=/etc/ssl/ca.pem",
        "smtp://mail.example.com?verify=off",
        "smtp://mail.example.com?tls=required&verify=maybe",
        "smtp://mail.example.com?tls=required&cafile=/nonexistent/ca.pem",
        "smtps://mail.example.com?tls=off",
        "smtp://user@mail.example.com",
        "smtp://:pw@mail.example.com",
        "smtp://us%C3%A9r:pw@mail.example.com",
        "capture:",
    ],
)
def test_bad_urls_are_refused(url):
    with pytest.raises(RelayConfigError):
        relay_from_url(url)


def test_config_errors_do_not_leak_the_password():
    with pytest.raises(RelayConfigError) as caught:
        relay_from_url("smtp://user:hunter2@mail.example.com/x")
    assert "hunter2" not in str(caught.value)


def test_url_forms(tmp_path, certificate):
    plain = relay_from_url("SMTP://mail.example.com")
    assert isinstance(plain, Smarthost)
    assert (plain.host, plain.port, plain.tls, plain.implicit_tls) == (
        "mail.example.com",
        25,
        "may",
        False,
    )
    assert plain.credentials is None
    secure = relay_from_url("smtps://u%40x:p%2Fw@[::1]")
    assert isinstance(secure, Smarthost)
    assert (secure.host, secure.port, secure.tls, secure.implicit_tls) == (
        "::1",
        465,
        "required",
        True,
    )
    assert secure.credentials == ("u@x", "p/w")
    assert secure.where == "[::1]:465"
    trusted = relay_from_url(f"smtp://h:2525?tls=required&cafile={certificate[0]}")
    assert isinstance(trusted, Smarthost)
    assert trusted.port == 2525 and trusted.context is not None
    off = relay_from_url("smtp://h?tls=off")
    assert isinstance(off, Smarthost) and off.context is None


def test_redacted_urls_keep_everything_but_the_password():
    assert redact_url("smtp://user:hunter2@mail.example.com:587") == (
        "smtp://user:***@mail.example.com:587"
    )
    assert redact_url("smtp://mail.example.com") == "smtp://mail.example.com"


def test_a_smarthost_opens_sessions_with_its_settings():
    smarthost = relay_from_url("smtps://u:p@mail.example.com:2465", helo_name="me.test", timeout=7)
    session = smarthost.session()
    assert (session.host, session.port, session.implicit_tls, session.tls) == (
        "mail.example.com",
        2465,
        True,
        "required",
    )
    assert (session.helo_name, session.timeout, session.credentials) == ("me.test", 7, ("u", "p"))
    assert session.context is smarthost.context
