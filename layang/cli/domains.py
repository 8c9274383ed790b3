"""``layang domains``: an account's sending domains, added (with the DNS records to
publish), listed and checked in DNS."""

from __future__ import annotations

from typing import Any

import click

from layang.cli.output import domain_errors, emit
from layang.cli.startup import account_named, open_db, prepare
from layang.cli.uses import DOMAINS, STORE, Uses
from layang.domain import sending_domains
from layang.serving.preflight import EXISTING, Needs


@click.group("domains")
def domains_group() -> None:
    """Sending domains: the DNS records to publish, and DKIM."""


def _dump_domain(state: Any) -> dict[str, Any]:
    from layang.api.domains import DomainSchema

    return DomainSchema().dump(state)


@Uses(Needs(EXISTING), STORE, DOMAINS)
@domains_group.command("add")
@click.argument("name")
@click.argument("domain")
@click.option("--return-path-domain", default=None, help="Default: bounces.DOMAIN.")
def domains_add(name: str, domain: str, return_path_domain: str | None) -> None:
    """Add DOMAIN to account NAME; prints it with the records to publish."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        account = account_named(name, config)
        state = sending_domains.create_domain(account, domain, return_path_domain, config)
    emit(_dump_domain(state))


@Uses(Needs(EXISTING), STORE, DOMAINS)
@domains_group.command("list")
@click.argument("name")
def domains_list(name: str) -> None:
    """List account NAME's sending domains, as of their last check."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        page = sending_domains.list_domains(account_named(name, config), config, limit=500)
    emit([_dump_domain(state) for state in page.items])


@Uses(Needs(EXISTING), STORE, DOMAINS)
@domains_group.command("verify")
@click.argument("name")
@click.argument("domain")
def domains_verify(name: str, domain: str) -> None:
    """Check DOMAIN's records in DNS now; prints the domain with each record's status."""
    config, _ = prepare()
    open_db(config, EXISTING)
    with domain_errors():
        state = sending_domains.verify_domain(account_named(name, config), domain, config)
    emit(_dump_domain(state))
