"""Shaping rules: the built-in providers, a TOML file that overrides or adds sites, and a bad
file stopping any command with one line and exit status 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from layang.destinations.shaping import Shaping, ShapingError, SiteRule, is_slow_down

GMAIL_MX = ["gmail-smtp-in.l.google.com", "alt1.gmail-smtp-in.l.google.com"]


def test_providers_are_matched_by_mx_suffix_and_named_by_their_rule():
    shaping = Shaping.load(None)
    google = shaping.rule_for(GMAIL_MX)
    assert google == SiteRule("google.com", 5, 50, None, "required")
    assert shaping.rule_for(["aspmx.l.googlemail.com"]).name == "google.com"
    assert shaping.rule_for(["example-com.mail.protection.outlook.com"]).name == (
        "protection.outlook.com"
    )
    assert shaping.rule_for(["outlook-com.olc.protection.outlook.com"]).name == "outlook.com"
    assert shaping.rule_for(["mta5.am0.yahoodns.net"]).messages_per_connection == 20
    assert shaping.rule_for(["mx01.mail.icloud.com"]).messages_per_connection == 5
    assert shaping.rule_for(["mx00.emig.gmx.net"]).name == "gmx.net"
    assert shaping.rule_for(["mx-ha03.web.de"]).name == "gmx.net"
    assert shaping.rule_for(["mxbiz1.qq.com"]).connections == 4
    # "notgoogle.com" does not end in ".google.com"
    assert shaping.rule_for(["mx.notgoogle.com"]).name == "mx.notgoogle.com"


def test_other_sites_are_named_by_their_mx_hosts_sorted():
    rule = Shaping.load(None).rule_for(["MX2.a.example.", "mx1.a.example", "mx2.a.example"])
    assert rule == SiteRule("mx1.a.example+mx2.a.example", 10, 100, None, "opportunistic")


def test_a_file_changes_the_default_overrides_a_provider_and_adds_sites(tmp_path):
    path = tmp_path / "shaping.toml"
    path.write_text(
        """
[default]
connections = 3
rate = "120/min"

[site."google.com"]
messages_per_connection = 10

[site."b.example"]
connections = 1
tls = "required"
rate = "5/s"
"""
    )
    shaping = Shaping.load(str(path))
    assert shaping.rule_for(GMAIL_MX) == SiteRule("google.com", 5, 10, 2.0, "required")
    assert shaping.rule_for(["mx.b.example"]) == SiteRule("b.example", 1, 100, 5.0, "required")
    assert shaping.rule_for(["b.example"]).name == "b.example"
    assert shaping.rule_for(["mx.c.example"]) == SiteRule(
        "mx.c.example", 3, 100, 2.0, "opportunistic"
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            '[site."x.example"]\nconnections = 0\n',
            'site."x.example".connections must be a positive',
        ),
        ('[site."x.example"]\nrate = "fast"\n', 'site."x.example".rate must look like 100/min'),
        ('[default]\ntls = "maybe"\n', "default.tls must be one of opportunistic, required"),
        ("[default]\nconnection = 5\n", "default.connection is not a shaping setting"),
        ("[sites]\n", "[sites] is not a shaping table"),
        ("[default\n", "is not valid TOML"),
    ],
)
def test_a_bad_file_is_refused_naming_the_file_and_key(tmp_path, text, says):
    path = tmp_path / "shaping.toml"
    path.write_text(text)
    with pytest.raises(ShapingError) as raised:
        Shaping.load(str(path))
    message = str(raised.value)
    assert message.startswith(f"LAYANG_SHAPING_FILE: {path}")
    assert says in message and "\n" not in message


@pytest.mark.parametrize("command", [["db", "upgrade"], ["accounts", "create", "shop"]])
def test_a_bad_shaping_file_stops_any_command_with_one_line(tmp_path, command):
    path = tmp_path / "shaping.toml"
    path.write_text('[site."google.com"]\nconnections = -1\n')
    env = {
        "PATH": "/usr/bin:/bin",
        "LAYANG_DATA_DIR": str(tmp_path / "var"),
        "LAYANG_SHAPING_FILE": str(path),
    }
    result = subprocess.run(
        [sys.executable, "-m", "layang", *command],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f'LAYANG_SHAPING_FILE: {path}: site."google.com".connections must be a positive '
        "whole number, not -1"
    ]
    assert not (tmp_path / "var" / "layang.db").exists()
    missing = dict(env, LAYANG_SHAPING_FILE=str(tmp_path / "nope.toml"))
    result = subprocess.run(
        [sys.executable, "-m", "layang", *command],
        cwd=tmp_path,
        env=missing,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2 and "nope.toml" in result.stderr


def test_a_site_of_very_many_hosts_keeps_a_bounded_name():
    hosts = [f"mx{i:04d}.huge.example" for i in range(200)]
    name = Shaping.load(None).rule_for(hosts).name
    assert len(name) <= 900 and name.startswith("mx0000.huge.example+mx0001")
    assert name == Shaping.load(None).rule_for(list(reversed(hosts))).name


def test_slow_down_replies_are_told_from_other_temporary_failures():
    assert is_slow_down("421 4.7.28 [203.0.113.9] Our system has detected an unusual rate")
    assert is_slow_down("451 4.7.500 Server busy. Please try again later from [1.2.3.4].")
    assert is_slow_down("421 4.7.0 [TSS04] Messages from 1.2.3.4 temporarily deferred")
    assert not is_slow_down("451 4.3.0 Mail server temporarily rejected message")
    assert not is_slow_down("451 4.7.1 Greylisted, please try again later")
    assert not is_slow_down("450 4.2.1 mailbox busy")
    assert not is_slow_down("550 5.7.1 rate of unsolicited mail too high")


def test_a_domain_joins_a_providers_site_only_through_the_providers_own_hosts():
    shaping = Shaping.load(None)
    mixed = ["mx.evil.example", "evil-example.mail.protection.outlook.com"]
    rule = shaping.rule_for(mixed)
    # A site of its own, named by its hosts, under the provider's figures.
    assert rule == SiteRule(
        "evil-example.mail.protection.outlook.com+mx.evil.example", 5, 50, None, "opportunistic"
    )
    assert shaping.rule_for(list(reversed(mixed))).name == rule.name
    assert shaping.rule_for(["a.mail.protection.outlook.com", "b.mx.microsoft"]).name == (
        "protection.outlook.com"
    )
