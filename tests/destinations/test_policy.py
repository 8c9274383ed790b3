"""The transport policy beyond what a domain publishes: a shaping rule's ``tls = "required"``,
a message's REQUIRETLS (RFC 8689), and a CA file that cannot be loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from layang.config import Config
from tests.destinations.transport import (
    MX1,
    World,
    mx_server,
    run_session,
)
from tests.support.upstream import make_self_signed_cert, server_tls_context


def test_a_shaping_rule_requiring_tls_refuses_an_unverified_certificate(
    world: World, tmp_path: Path
) -> None:
    policy = world.policy(MX1).requiring_tls()
    assert policy.kind == "required" and policy.requires_verified_tls
    context = server_tls_context(*make_self_signed_cert(tmp_path / "self", MX1))
    with mx_server(context) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert not check.ok and check.reply.endswith("(TLS is required)")
        assert mx.received == []
    with mx_server(world.ca.server_context(MX1)) as mx:
        check = run_session(world, policy, MX1, mx.port)
        assert check.ok and check.tls == {
            **check.tls,
            "verified": True,
            "policy": "required",
        }


def test_requiretls_to_an_mx_without_it_bounces(world: World) -> None:
    policy = world.policy(MX1)
    with mx_server(world.ca.server_context(MX1)) as mx:
        check = run_session(world, policy, MX1, mx.port, requirement="requiretls")
        assert not check.ok and check.bounce
        assert check.reply == (
            "550 5.7.30 REQUIRETLS not possible: mx1.bank.test does not advertise REQUIRETLS"
        )
        assert mx.received == []
    with mx_server(world.ca.server_context(MX1), requiretls=True) as mx:
        check = run_session(world, policy, MX1, mx.port, requirement="requiretls")
        assert check.ok and check.tls["verified"] and check.tls["policy"] == "required"


def test_requiretls_refuses_plaintext_even_without_a_policy(world: World) -> None:
    policy = world.policy(MX1)
    with mx_server(None) as mx:
        check = run_session(world, policy, MX1, mx.port, requirement="requiretls")
        assert not check.ok and check.bounce
        assert "does not offer STARTTLS" in check.reply


def test_a_cafile_that_cannot_be_loaded_stops_at_start(tmp_path: Path) -> None:
    from layang.config import ConfigError

    (tmp_path / "junk.pem").write_text("not a certificate")
    for path in (tmp_path / "missing.pem", tmp_path / "junk.pem"):
        environ = {"LAYANG_TLS_CAFILE": str(path), "LAYANG_SECRET_KEY": "k"}
        with pytest.raises(ConfigError, match=r"^LAYANG_TLS_CAFILE: cannot load CA certificates"):
            Config.from_env(environ, dotenv=False)
