"""Source addresses and EHLO names for outbound sessions: parsed from LAYANG_SOURCE_ADDRESSES,
each checked at start to be an address of this host."""

from __future__ import annotations

from dataclasses import replace

import pytest

from layang.config import Config, ConfigError, SourceAddress
from layang.serving.preflight import Needs, PreflightError, check


def test_addresses_with_their_names_and_the_default_name():
    config = Config.from_env(
        {
            "LAYANG_SECRET_KEY": "k",
            "LAYANG_SOURCE_ADDRESSES": " 203.0.113.7=MTA1.Example.com. , [2001:db8::7]",
            "LAYANG_EHLO_NAME": "Mail.Example.com",
        },
        dotenv=False,
    )
    assert config.sources == (
        SourceAddress("203.0.113.7", "mta1.example.com"),
        SourceAddress("2001:db8::7", "mail.example.com"),
    )
    assert Config(secret_key="k").sources == ()
    assert Config(secret_key="k", ehlo_name="mx.example.org").helo_name == "mx.example.org"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ("mta1.example.com", "'mta1.example.com' is not an IP address"),
        ("203.0.113.7=not a name", "'not a name' is not a host name"),
        (",", "must list addresses as ip[=ehlo.name]"),
    ],
)
def test_a_bad_list_names_the_variable_and_the_item(raw, says):
    with pytest.raises(ConfigError) as raised:
        Config.from_env({"LAYANG_SECRET_KEY": "k", "LAYANG_SOURCE_ADDRESSES": raw}, dotenv=False)
    assert str(raised.value).startswith("LAYANG_SOURCE_ADDRESSES") and says in str(raised.value)


def test_an_address_this_host_does_not_have_stops_the_sender(config):
    ours = replace(config, source_addresses=(("127.0.0.1", "localhost.localdomain"), ("::1", "")))
    check(ours, Needs(None, relay=True)).close()
    theirs = replace(
        config, source_addresses=(("127.0.0.1", ""), ("192.0.2.55", "mta.example.com"))
    )
    with pytest.raises(PreflightError) as raised:
        check(theirs, Needs(None, relay=True))
    assert str(raised.value).startswith(
        "LAYANG_SOURCE_ADDRESSES: 192.0.2.55 is not an address of this host ("
    )
    check(theirs, Needs(None)).close()  # commands that send nothing do not care
