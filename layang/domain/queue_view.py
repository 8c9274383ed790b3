"""The delivery queue as people see it: waiting mail by destination site (the operator's view)
and by recipient domain (an account's own view).

Waiting mail is every recipient with a next attempt (``next_attempt_at`` set), grouped by its
``domain`` and joined to the site that domain last resolved to (``mx_domain``); a domain not
resolved yet is its own site. The state of each site is what the senders share in
``site_state`` (see ``layang.delivery.sites``), its sessions the live ``site_slot`` rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import peewee

from layang.clock import now_ms
from layang.models import OK, MxDomain, Recipient, SiteSlot, SiteState


@dataclass(frozen=True)
class SiteQueue:
    """One destination site: its recipient domains with waiting mail, how many emails wait
    (``queued``) and how many of them a sender holds now (``in_flight``), its open sessions
    and limit, its state (``ok`` | ``throttled`` | ``suspended``) until when (epoch ms), and
    its last reply."""

    site: str
    domains: tuple[str, ...]
    queued: int
    in_flight: int
    sessions: int
    limit: int | None
    state: str
    until_ms: int | None
    reason: str | None
    last_reply: str | None


@dataclass(frozen=True)
class DomainQueue:
    """One recipient domain's waiting mail of one account."""

    domain: str
    site: str
    queued: int
    oldest_at: int
    state: str
    reason: str | None
    until_ms: int | None = None


def _waiting_by_domain(account_id: int | None, now: int) -> list[tuple[str, str, int, int, int]]:
    """(domain, site, queued, in flight, oldest created_at) of the waiting mail."""
    in_flight = peewee.Case(None, [(Recipient.lease_expires_at > now, 1)], 0)
    query = (
        Recipient.select(
            Recipient.domain,
            MxDomain.site,
            peewee.fn.COUNT(Recipient.id),
            peewee.fn.SUM(in_flight),
            peewee.fn.MIN(Recipient.created_at),
        )
        .join(MxDomain, peewee.JOIN.LEFT_OUTER, on=(MxDomain.domain == Recipient.domain))
        .where(Recipient.next_attempt_at.is_null(False))
        .group_by(Recipient.domain, MxDomain.site)
    )
    if account_id is not None:
        query = query.where(Recipient.account == account_id)
    return [
        (domain or "", site or domain or "", count, held or 0, oldest)
        for domain, site, count, held, oldest in query.tuples()
    ]


def _states(sites: set[str]) -> dict[str, SiteState]:
    """The state rows of ``sites`` and of every site that may be holding mail back."""
    rows = {row.site: row for row in SiteState.holding_back()}
    wanted = sorted(set(sites) - set(rows))
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        rows.update({row.site: row for row in SiteState.select().where(SiteState.site.in_(chunk))})
    return rows


def site_queues(now: int | None = None) -> list[SiteQueue]:
    """Every site with waiting mail, open sessions or a state other than ``ok``, busiest
    first."""
    now = now_ms() if now is None else now
    totals: dict[str, list] = {}
    for domain, site, queued, held, _ in _waiting_by_domain(None, now):
        entry = totals.setdefault(site, [[], 0, 0])
        entry[0].append(domain)
        entry[1] += queued
        entry[2] += held
    sessions = dict(
        SiteSlot.select(SiteSlot.site, peewee.fn.COUNT(SiteSlot.id))
        .where(SiteSlot.expires_at > now)
        .group_by(SiteSlot.site)
        .tuples()
    )
    states = _states(set(totals) | set(sessions))
    names = set(totals) | set(sessions)
    names |= {site for site, row in states.items() if row.shown(now)[0] != OK}
    rows = []
    for site in names:
        domains, queued, held = totals.get(site, [[], 0, 0])
        state = states.get(site)
        shown, until = state.shown(now) if state is not None else (OK, None)
        rows.append(
            SiteQueue(
                site=site,
                domains=tuple(sorted(domains)),
                queued=queued,
                in_flight=held,
                sessions=sessions.get(site, 0),
                limit=state.limit() if state is not None else None,
                state=shown,
                until_ms=until,
                reason=state.reason if state is not None and shown != OK else None,
                last_reply=state.last_reply if state is not None else None,
            )
        )
    return sorted(rows, key=lambda row: (-row.queued, row.site))


def account_queue(account_id: int, now: int | None = None) -> list[DomainQueue]:
    """The account's waiting mail by recipient domain, most first."""
    now = now_ms() if now is None else now
    waiting = _waiting_by_domain(account_id, now)
    states = _states({site for _, site, _, _, _ in waiting})
    items = []
    for domain, site, queued, _, oldest in waiting:
        state = states.get(site)
        shown, until = state.shown(now) if state is not None else (OK, None)
        reason = state.reason if state is not None and shown != OK else None
        items.append(DomainQueue(domain, site, queued, oldest, shown, reason, until))
    return sorted(items, key=lambda item: (-item.queued, item.domain))


def site_named(name: str) -> str:
    """The site ``name`` means: the site of a recipient domain it names, else itself."""
    name = name.strip().rstrip(".").lower()
    row = MxDomain.get_or_none(MxDomain.domain == name)
    return row.site if row is not None else name


def attention_sites(now: int | None = None) -> list[SiteQueue]:
    """The sites throttled or suspended now (the console's attention list)."""
    return [row for row in site_queues(now) if row.state != OK]


def account_attention(account_id: int, now: int | None = None) -> list[DomainQueue]:
    """The account's recipient domains whose mail waits on a throttled or suspended site;
    one small query when no site is (the usual case)."""
    now = now_ms() if now is None else now
    waiting = [row for row in SiteState.holding_back() if row.shown(now)[0] != OK]
    if not waiting:
        return []
    return [item for item in account_queue(account_id, now) if item.state != OK]
