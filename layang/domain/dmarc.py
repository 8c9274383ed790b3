"""DMARC aggregate reports (RFC 7489, docs/api.md "DMARC reports"): what mailbox providers saw
of mail sent as a domain.

The DMARC record Layang suggests names ``rua=mailto:dmarc@<returnPathDomain>``; ``layang
inbound`` reads the reports sent there (``layang.inbound.dmarc_reports``) and ``store_reports``
keeps them, once each (a reporter's report id is unique), for the account that verified the
domain, when they came to that domain's own reporting address. ``dmarc_figures`` sums them per
source over a date range and says which sources are Layang's own: its source addresses, its
relay host, or mail that passed aligned DKIM with one of the domain's Layang keys. The rest are
"unknown sources sending as your domain": another service the owner forgot, or someone
spoofing it.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from urllib.parse import urlsplit

import peewee

from layang.clock import now_ms
from layang.config import Config
from layang.db import write_transaction
from layang.domain.dns_lookup import DnsLookup
from layang.domain.errors import InvalidInput
from layang.domain.sending_domains import _get
from layang.models import VERIFIED, Account, DkimKey, DmarcRecord, DmarcReport, SendingDomain

log = logging.getLogger("layang.inbound")

DEFAULT_DAYS = 30
OTHER_SOURCES = "*"
"""The source address of a report's rows past its cap on rows (``MAX_ROWS`` of
``layang.inbound.dmarc_reports``): the other sources, summed by their results."""


@dataclass(frozen=True, slots=True)
class ReportRow:
    """One ``<record>``: ``count`` messages from ``source_ip``. ``dkim`` and ``spf`` are the
    authentication results, ``*_aligned`` DMARC's evaluation (a pass aligned with the From
    domain), ``dkim_passed`` the ``domain:selector`` signatures that passed."""

    source_ip: str
    count: int
    disposition: str
    dkim: str
    spf: str
    dkim_aligned: bool
    spf_aligned: bool
    header_from: str
    dkim_passed: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AggregateReport:
    org_name: str
    report_id: str
    domain: str
    begins_at: int
    ends_at: int
    rows: tuple[ReportRow, ...]


@dataclass(frozen=True, slots=True)
class Source:
    ip: str
    count: int
    spf: str
    dkim: str
    spf_aligned: bool
    dkim_aligned: bool
    disposition: str
    known: bool


@dataclass(frozen=True, slots=True)
class DmarcFigures:
    domain: str
    start: date
    end: date
    reports: int
    total: int
    sources: tuple[Source, ...]

    @property
    def unknown(self) -> tuple[Source, ...]:
        return tuple(source for source in self.sources if not source.known)


STORE_BATCH_ROWS = 80
"""Rows one insert stores: 12 values each, within SQLite's oldest limit of 999 per statement."""


def reporting_domain(address: str) -> str:
    """The domain of a reporting address (``dmarc@bounces.example.com`` → its domain)."""
    return address.strip().strip("<>").rpartition("@")[2].lower().rstrip(".")


def store_reports(reports: Sequence[AggregateReport], received_at: Iterable[str]) -> list[str]:
    """Keep each report received at one of the domains ``received_at`` (the domains of the
    ``dmarc@`` addresses the mail came to), unless already kept; returns the domains of those
    kept now or before (a copy sent again is taken, not counted twice).

    A report is kept only for a sending domain verified here whose own reporting address it
    came to (``dmarc@<returnPathDomain>``, the ``rua`` Layang suggests), and belongs to the
    account that verified it: no one can file figures about another account's domain, nor read
    them by claiming its name. Others are skipped (logged). Its rows are stored in inserts of
    ``STORE_BATCH_ROWS``, in one transaction."""
    at = {domain.lower().rstrip(".") for domain in received_at}
    kept = []
    for report in reports:
        owner = SendingDomain.get_or_none(
            (SendingDomain.domain == report.domain) & (SendingDomain.status == VERIFIED)
        )
        if owner is None or owner.return_path_domain.lower() not in at:
            log.info(
                "DMARC report %s from %s for %s skipped: not received at a verified domain's "
                "reporting address",
                report.report_id,
                report.org_name,
                report.domain,
            )
            continue
        try:
            with write_transaction():
                row = DmarcReport.create(
                    domain=report.domain,
                    org_name=report.org_name,
                    report_id=report.report_id,
                    begins_at=report.begins_at,
                    ends_at=report.ends_at,
                    received_at=now_ms(),
                    account=owner.account_id,
                )
                for start in range(0, len(report.rows), STORE_BATCH_ROWS):
                    DmarcRecord.insert_many(
                        [
                            {
                                "report": row.id,
                                "domain": report.domain,
                                "begins_at": report.begins_at,
                                "source_ip": r.source_ip,
                                "count": r.count,
                                "disposition": r.disposition,
                                "dkim": r.dkim,
                                "spf": r.spf,
                                "dkim_aligned": int(r.dkim_aligned),
                                "spf_aligned": int(r.spf_aligned),
                                "header_from": r.header_from,
                                "dkim_domains": ",".join(r.dkim_passed),
                            }
                            for r in report.rows[start : start + STORE_BATCH_ROWS]
                        ]
                    ).execute()
        except peewee.IntegrityError:
            # A copy sent again: taken (it is this domain's), not counted twice.
            log.info("DMARC report %s from %s already kept", report.report_id, report.org_name)
            kept.append(report.domain)
            continue
        log.info(
            "DMARC report %s from %s for %s kept: %d rows",
            report.report_id,
            report.org_name,
            report.domain,
            len(report.rows),
        )
        kept.append(report.domain)
    return kept


def _day_ms(day: date) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)


def _own_addresses(config: Config) -> set[str]:
    """Layang's source addresses and its relay host's addresses."""
    own = {address for _, pool in config.source_pools for address in pool}
    host = urlsplit(config.relay_url).hostname if "://" in config.relay_url else None
    if host:
        try:
            own.add(str(ipaddress.ip_address(host)))
        except ValueError:
            own.update(DnsLookup(config).addresses(host).values)
    return own


def dmarc_figures(
    account: Account, domain: str, start: date | None, end: date | None, config: Config
) -> DmarcFigures:
    """The reports about the account's sending domain ``domain`` whose period begins between
    ``start`` and ``end`` (whole UTC days; default the last 30 days), summed per source and
    result, largest first; only the reports received while the account had the domain
    verified (none for a pending claim). Raises ``NotFound`` for a domain the account does not
    have and ``InvalidInput`` when ``start`` is after ``end``."""
    row = _get(account, domain)
    end = end or datetime.now(UTC).date()
    start = start or end - timedelta(days=DEFAULT_DAYS)
    if start > end:
        raise InvalidInput("from", f"{start.isoformat()} is after to ({end.isoformat()}).")
    selectors = {
        f"{row.domain}:{selector.lower()}"
        for (selector,) in DkimKey.select(DkimKey.selector)
        .where(DkimKey.sending_domain == row.id)
        .tuples()
    }
    in_range = (
        # Only what came while this account had the domain verified (``store_reports``).
        (DmarcReport.account == account.id)
        & (DmarcRecord.domain == row.domain)
        & (DmarcRecord.begins_at >= _day_ms(start))
        & (DmarcRecord.begins_at < _day_ms(end + timedelta(days=1)))
    )
    reports = (
        DmarcRecord.select(peewee.fn.COUNT(DmarcRecord.report.distinct()))
        .join(DmarcReport)
        .where(in_range)
        .scalar()
    )
    # The database sums the rows (reports repeat the same sources day after day); what is
    # left is one row per source, result and signatures.
    columns = (
        DmarcRecord.source_ip,
        DmarcRecord.spf,
        DmarcRecord.dkim,
        DmarcRecord.spf_aligned,
        DmarcRecord.dkim_aligned,
        DmarcRecord.disposition,
        DmarcRecord.dkim_domains,
    )
    grouped = (
        DmarcRecord.select(*columns, peewee.fn.SUM(DmarcRecord.count))
        .join(DmarcReport)
        .where(in_range)
        .group_by(*columns)
        .tuples()
    )
    own = _own_addresses(config)
    sums: dict[tuple[str, str, str, bool, bool, str], list[int | bool]] = {}
    for source_ip, spf, dkim, spf_aligned, dkim_aligned, disposition, domains, count in grouped:
        key = (source_ip, spf, dkim, bool(spf_aligned), bool(dkim_aligned), disposition)
        signed_here = bool(dkim_aligned) and bool(selectors & set(filter(None, domains.split(","))))
        entry = sums.setdefault(key, [0, False])
        entry[0] = int(entry[0]) + int(count)
        entry[1] = bool(entry[1]) or signed_here or source_ip in own
    sources = sorted(
        (
            Source(ip, int(count), spf, dkim, spf_aligned, dkim_aligned, disposition, bool(known))
            for (ip, spf, dkim, spf_aligned, dkim_aligned, disposition), (
                count,
                known,
            ) in sums.items()
        ),
        key=lambda s: (-s.count, s.ip),
    )
    return DmarcFigures(
        domain=row.domain,
        start=start,
        end=end,
        reports=int(reports or 0),
        total=sum(s.count for s in sources),
        sources=tuple(sources),
    )
