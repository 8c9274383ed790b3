"""DMARC reports stored within bounds and shown only to their domain's owner: identical rows
summed, rows per report capped, stored in batches any database takes; a report kept only when it
came to the verified domain's own reporting address, its figures only for the account that
verified the domain. Real SMTP to a real ``layang inbound``, on SQLite and PostgreSQL."""

from __future__ import annotations

import gzip
import smtplib
import time

import pytest

from layang.domain import accounts
from layang.domain.dmarc import OTHER_SOURCES
from layang.inbound.dmarc_reports import MAX_ROWS
from layang.models import DmarcRecord, DmarcReport, InboundMessage
from tests.conftest import BACKENDS
from tests.delivery.test_crash import wait_until
from tests.inbound.test_dmarc import (
    DOMAIN,
    MAILBOX,
    config,
    deliver,
    dmarc,
    inbound,
    mark_verified,
    report_mail,
    selector,
    xml,
)

__all__ = ["config", "inbound", "selector"]  # fixtures, used by name

pytestmark = pytest.mark.parametrize("backend", BACKENDS)

RECORD = """<record><row><source_ip>{ip}</source_ip><count>{count}</count><policy_evaluated>
<disposition>none</disposition><dkim>fail</dkim><spf>pass</spf></policy_evaluated></row>
<identifiers><header_from>example.com</header_from></identifiers><auth_results><spf>
<domain>bounces.example.com</domain><result>pass</result></spf></auth_results></record>"""


def report(records: str, report_id: str = "r-1", domain: str = DOMAIN) -> bytes:
    return (
        "<?xml version='1.0'?><feedback><report_metadata><org_name>big.test</org_name>"
        f"<report_id>{report_id}</report_id><date_range><begin>1795478400</begin>"
        "<end>1795564799</end></date_range></report_metadata><policy_published>"
        f"<domain>{domain}</domain><p>none</p></policy_published>{records}</feedback>"
    ).encode()


def mailed(xml_bytes: bytes) -> bytes:
    return report_mail(
        "dmarc@big.test", "Report", gzip.compress(xml_bytes), "r.xml.gz", "application/gzip", "R"
    )


def day(client, auth):
    return dmarc(client, auth, "from=2026-11-24&to=2026-11-24")


def test_identical_rows_are_summed_into_one(client, auth, selector, inbound):
    # 20,000 records saying the same thing: one row, their counts summed.
    same = RECORD.format(ip="198.51.100.7", count=3) * 20_000
    deliver(inbound, mailed(report(same)))
    wait_until(lambda: DmarcReport.select().count() == 1, 20, "the report was not kept")
    assert DmarcRecord.select().count() == 1
    figures = day(client, auth).get_json()
    assert (figures["reports"], figures["total"]) == (1, 60_000)
    assert [(s["ip"], s["count"]) for s in figures["sources"]] == [("198.51.100.7", 60_000)]


def test_a_report_of_many_sources_keeps_its_cap_and_its_total(client, auth, selector, inbound):
    # 80,000 distinct sources, more than a report keeps: the rest summed as other sources, so
    # the total stays whole; stored on either database, and the view answers at once.
    sources = 80_000
    records = "".join(
        RECORD.format(ip=f"10.{n // 65536}.{n // 256 % 256}.{n % 256}", count=1)
        for n in range(sources)
    )
    deliver(inbound, mailed(report(records)))
    wait_until(lambda: DmarcReport.select().count() == 1, 60, "the report was not kept")
    assert DmarcRecord.select().count() == MAX_ROWS + 1
    assert InboundMessage.select().count() == 0
    started = time.monotonic()
    figures = day(client, auth).get_json()
    assert time.monotonic() - started < 5
    assert figures["total"] == sources
    other = [s for s in figures["sources"] if s["ip"] == OTHER_SOURCES]
    assert [(s["count"], s["known"]) for s in other] == [(sources - MAX_ROWS, False)]


def test_figures_are_shown_only_to_the_account_that_verified_the_domain(app, client, auth, inbound):
    # Two accounts claim the name while it is pending; the test's account verifies it.
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    for claimant in (auth, other_auth):
        claimed = client.post("/v1/layang/domains", headers=claimant, json={"domain": DOMAIN})
        assert claimed.status_code == 201
    mark_verified(DOMAIN, "acme")
    deliver(inbound, mailed(report(RECORD.format(ip="198.51.100.7", count=5))))
    wait_until(lambda: DmarcReport.select().count() == 1, 10, "the report was not kept")
    assert day(client, auth).get_json()["total"] == 5

    # The other's stale pending claim of the same name sees nothing of the owner's.
    seen = day(client, other_auth)
    assert seen.status_code == 200
    shown = seen.get_json()
    assert (shown["reports"], shown["total"], shown["sources"]) == (0, 0, [])


def test_a_report_is_taken_only_at_its_domains_own_reporting_address(
    app, client, auth, selector, inbound
):
    # A stranger's account claims (and verifies) a domain of its own: its dmarc@ address is
    # open, but it may not file figures about example.com there.
    other = accounts.create_account("other", live=True)
    other_auth = {"Authorization": f"Bearer {accounts.create_api_key(other)[1]}"}
    added = client.post("/v1/layang/domains", headers=other_auth, json={"domain": "other.test"})
    assert added.status_code == 201
    mark_verified("other.test")
    forged = mailed(report(RECORD.format(ip="203.0.113.9", count=1000), report_id="forged"))
    deliver(inbound, forged, rcpt="dmarc@bounces.other.test")
    wait_until(lambda: InboundMessage.select().count() == 1, 10, "the forged report was not kept")
    assert DmarcReport.select().count() == 0
    assert day(client, auth).get_json()["total"] == 0

    # The reporting address of a domain only pending here, or of none, takes no mail at all.
    client.post("/v1/layang/domains", headers=other_auth, json={"domain": "pending.test"})
    pending = report(RECORD.format(ip="203.0.113.9", count=1), report_id="p", domain="pending.test")
    for address in ("dmarc@bounces.pending.test", "dmarc@bounces.127.0.0.1"):
        with pytest.raises(smtplib.SMTPRecipientsRefused):
            deliver(inbound, mailed(pending), rcpt=address)
    assert DmarcReport.select().count() == 0

    # The same report at example.com's own address counts.
    deliver(inbound, forged, rcpt=MAILBOX)
    wait_until(lambda: DmarcReport.select().count() == 1, 10, "the report was not kept")
    assert day(client, auth).get_json()["total"] == 1000


def test_the_fixture_reports_still_read(client, auth, selector, inbound):
    deliver(inbound, mailed(xml("google", selector)))
    wait_until(lambda: DmarcReport.select().count() == 1, 10, "the report was not kept")
