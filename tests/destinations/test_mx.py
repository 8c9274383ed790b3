"""MX resolution against a real DNS server: preference order, random among equals, implicit MX,
null MX, NXDOMAIN, SERVFAIL and timeouts (never falling back to A), IPv4 and IPv6, the TTL
cache, and sites named by shaping rule or MX host set."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from layang.destinations.mx import MxFailure, MxResolver, remember_sites, site_of, sites_of
from layang.destinations.shaping import Shaping
from layang.models import MxDomain


def resolve(resolver, domain):
    return asyncio.run(resolver.resolve(domain))


def failure(resolver, domain) -> MxFailure:
    with pytest.raises(MxFailure) as raised:
        resolve(resolver, domain)
    return raised.value


@pytest.fixture
def resolver(internet):
    return MxResolver(internet.resolver, Shaping.load(None), timeout=2.0, allow_private=True)


def test_hosts_come_in_preference_order_and_equals_in_random_order(internet, resolver):
    for name in ("mx1.a.example", "mx2.a.example", "backup.a.example"):
        internet.server(name)
    internet.domain("a.example", (20, "backup.a.example"), (10, "mx2.a.example"))
    internet.domain("a.example", (10, "mx1.a.example"))
    orders = set()
    for _ in range(30):
        destination = resolve(resolver, "A.Example.")
        names = [host.name for host in destination.hosts]
        assert names[2] == "backup.a.example" and sorted(names[:2]) == [
            "mx1.a.example",
            "mx2.a.example",
        ]
        orders.add(tuple(names))
    assert len(orders) == 2  # both equal hosts come first, in turn
    assert destination.domain == "a.example"
    assert destination.site == "backup.a.example+mx1.a.example+mx2.a.example"
    assert [h.preference for h in destination.hosts] == [10, 10, 20]
    by_name = {h.name: h.addresses for h in destination.hosts}
    assert by_name["mx1.a.example"] == (internet.servers["mx1.a.example"].host,)


def test_domains_sharing_an_mx_set_share_a_site_and_providers_are_named_by_rule(internet, resolver):
    internet.server("mx.shared.example")
    internet.domain("one.example", (10, "mx.shared.example"))
    internet.domain("two.example", (5, "MX.shared.example."))
    assert resolve(resolver, "one.example").site == resolve(resolver, "two.example").site
    internet.server("gmail-smtp-in.l.google.com")
    internet.server("alt1.gmail-smtp-in.l.google.com")
    internet.domain("workspace.example", (1, "gmail-smtp-in.l.google.com"))
    internet.domain("workspace.example", (5, "alt1.gmail-smtp-in.l.google.com"))
    google = resolve(resolver, "workspace.example")
    assert google.site == "google.com" and google.rule.connections == 5


def test_a_domain_without_mx_is_its_own_mail_server_over_ipv4_and_ipv6(internet, resolver):
    internet.zone.add_a("plain.example", "127.0.0.9")
    internet.zone.add_aaaa("plain.example", "::1")
    destination = resolve(resolver, "plain.example")
    assert [(h.name, h.preference, h.addresses) for h in destination.hosts] == [
        ("plain.example", 0, ("127.0.0.9", "::1"))
    ]
    assert destination.site == "plain.example"
    v6 = internet.server("mx.six.example", ipv6=True)
    internet.domain("six.example", (10, "mx.six.example"))
    assert resolve(resolver, "six.example").hosts[0].addresses == (v6.host,)


def test_null_mx_and_missing_domains_bounce_at_once(internet, resolver):
    internet.zone.add_null_mx("nomail.example")
    internet.zone.add_a("nomail.example", "127.0.0.9")  # never used: the domain said no
    null = failure(resolver, "nomail.example")
    assert (null.kind, null.code) == ("null_mx", 556)
    assert null.reply == "556 5.1.10 Recipient domain nomail.example does not accept mail (null MX)"
    missing = failure(resolver, "nowhere.example")
    assert (missing.kind, missing.code) == ("no_domain", 550)
    assert missing.reply.startswith("550 5.1.2 Recipient domain nowhere.example does not exist")
    internet.zone.exists("bare.example")
    bare = failure(resolver, "bare.example")
    assert bare.kind == "no_domain" and "no MX, A or AAAA" in bare.reply


def test_a_domain_whose_every_mx_host_is_missing_or_without_address_bounces(internet, resolver):
    # RFC 5321 section 5.1: an MX set none of whose names resolves is an error, not a wait.
    internet.domain("ghost.example", (10, "mx.nonexistent.example"))
    ghost = failure(resolver, "ghost.example")
    assert (ghost.kind, ghost.code) == ("no_domain", 550)
    assert ghost.reply == (
        "550 5.1.2 Recipient domain ghost.example has no usable mail server"
        " (no address for MX host mx.nonexistent.example)"
    )
    internet.zone.exists("mx.bare.example")  # the name exists, with no A or AAAA
    internet.zone.add_txt("mx.txt.example", "v=spf1 -all")
    internet.domain("bare-mx.example", (10, "mx.bare.example"), (20, "mx.txt.example"))
    bare = failure(resolver, "bare-mx.example")
    assert (bare.kind, bare.code) == ("no_domain", 550)
    assert "mx.bare.example, mx.txt.example" in bare.reply
    # One usable host among missing ones is enough.
    internet.server("mx.real.example")
    internet.domain("mixed.example", (5, "mx.nonexistent.example"), (10, "mx.real.example"))
    assert [h.name for h in resolve(resolver, "mixed.example").hosts] == ["mx.real.example"]
    # A missing host beside one whose look-up fails for now: that one may yet answer.
    internet.domain("unsure.example", (10, "mx.nonexistent.example"), (20, "mx.down.example"))
    internet.zone.servfail.add("mx.down.example")
    unsure = failure(resolver, "unsure.example")
    assert (unsure.kind, unsure.code) == ("temporary", 451)
    assert "SERVFAIL for mx.down.example" in unsure.reply
    internet.domain("hushed.example", (10, "mx.nonexistent.example"), (20, "mx.hushed.example"))
    internet.zone.add_a("mx.hushed.example", "127.0.0.9")
    internet.zone.silent.add("mx.hushed.example")
    slow = MxResolver(internet.resolver, Shaping.load(None), timeout=0.5)
    hushed = failure(slow, "hushed.example")
    assert hushed.kind == "temporary" and "timeout" in hushed.reply


def test_servfail_and_timeouts_delay_and_never_fall_back_to_a(internet, resolver):
    internet.zone.add_a("broken.example", "127.0.0.9")
    internet.zone.servfail.add("broken.example")
    broken = failure(resolver, "broken.example")
    assert (broken.kind, broken.code) == ("temporary", 451)
    assert broken.reply.startswith("451 4.4.3 The DNS look-up of broken.example failed (SERVFAIL")
    assert ("broken.example", "A") not in internet.zone.queries
    internet.zone.add_a("quiet.example", "127.0.0.9")
    internet.zone.silent.add("quiet.example")
    slow = MxResolver(internet.resolver, Shaping.load(None), timeout=0.5)
    quiet = failure(slow, "quiet.example")
    assert quiet.kind == "temporary" and "timeout" in quiet.reply
    assert ("quiet.example", "A") not in internet.zone.queries
    # An MX host whose address cannot be looked up now: a delay too, not a bounce.
    internet.domain("half.example", (10, "mx.broken.example"))
    internet.zone.servfail.add("mx.broken.example")
    assert failure(resolver, "half.example").kind == "temporary"


def test_answers_are_cached_for_their_ttl(internet, resolver):
    internet.server("mx.cached.example")
    internet.domain("cached.example", (10, "mx.cached.example"))
    internet.zone.set_ttl("cached.example", "MX", 1)
    resolve(resolver, "cached.example")
    asked = internet.zone.queries.count(("cached.example", "MX"))
    resolve(resolver, "cached.example")
    assert internet.zone.queries.count(("cached.example", "MX")) == asked
    time.sleep(1.1)
    resolve(resolver, "cached.example")
    assert internet.zone.queries.count(("cached.example", "MX")) == asked + 1


def test_the_resolver_setting_is_honoured_and_sites_are_remembered(internet, app, config):
    internet.server("mx.b.example")
    internet.domain("b.example", (10, "mx.b.example"))
    internet.domain("c.example", (10, "mx.b.example"))
    resolver = MxResolver.from_config(
        replace(config, dns_resolver=internet.resolver), Shaping.load(None)
    )
    for domain in ("b.example", "c.example", "b.example"):
        resolve(resolver, domain)
    learned = resolver.learned_sites()
    assert sorted(d for d, _, _ in learned) == ["b.example", "c.example"]
    assert resolver.learned_sites() == []
    assert remember_sites(learned) == 2
    remember_sites([("b.example", "elsewhere", 1)])
    rows = {row.domain: row.site for row in MxDomain.select()}
    assert rows == {"b.example": "elsewhere", "c.example": "mx.b.example"}
    assert all(expires > time.time() * 1000 for _, _, expires in learned)
    # What the queue views read back.
    assert sites_of(["b.example", "c.example", "d.example"]) == rows
    assert (site_of("C.Example."), site_of("d.example")) == ("mx.b.example", None)
