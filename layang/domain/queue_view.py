"""The delivery queue as people see it: waiting mail by destination site (the operator's view)
and by recipient domain (an account's own view).

Waiting mail is every recipient with a next attempt (``next_attempt_at`` set), grouped by its
``domain`` and placed in the site that domain last resolved to
(:func:`layang.destinations.mx.sites_of`: named by its MX hosts once its MX records are known,
even when none of them can be reached); a domain whose MX records are not known yet is its own
site. The state
of each site and its open sessions are what the senders share (:mod:`layang.destinations.sites`).
The queue is described in docs/delivery.md and served as ``GET /v1/layang/queue``
(docs/api.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import peewee

from layang.clock import now_ms
from layang.destinations import mx, sites
from layang.destinations.sites import SiteView
from layang.models import OK, Recipient


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
            peewee.fn.COUNT(Recipient.id),
            peewee.fn.SUM(in_flight),
            peewee.fn.MIN(Recipient.created_at),
        )
        .where(Recipient.next_attempt_at.is_null(False))
        .group_by(Recipient.domain)
    )
    if account_id is not None:
        query = query.where(Recipient.account == account_id)
    waiting = list(query.tuples())
    site_of = mx.sites_of(domain for domain, _, _, _ in waiting if domain)
    return [
        (domain or "", site_of.get(domain) or domain or "", count, held or 0, oldest)
        for domain, count, held, oldest in waiting
    ]


def _shown(view: SiteView | None) -> tuple[str, int | None, str | None]:
    """(state, until when, why) of a site as the views show it; no state is ``ok``."""
    if view is None:
        return OK, None, None
    return view.state, view.until_ms, view.reason


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
    sessions = sites.session_counts(now=now)
    states = sites.views(set(totals) | set(sessions), now=now)
    names = set(totals) | set(sessions)
    names |= {site for site, view in states.items() if view.state != OK}
    rows = []
    for site in names:
        domains, queued, held = totals.get(site, [[], 0, 0])
        state = states.get(site)
        shown, until, reason = _shown(state)
        rows.append(
            SiteQueue(
                site=site,
                domains=tuple(sorted(domains)),
                queued=queued,
                in_flight=held,
                sessions=sessions.get(site, 0),
                limit=state.limit if state is not None else None,
                state=shown,
                until_ms=until,
                reason=reason,
                last_reply=state.last_reply if state is not None else None,
            )
        )
    return sorted(rows, key=lambda row: (-row.queued, row.site))


def account_queue(account_id: int, now: int | None = None) -> list[DomainQueue]:
    """The account's waiting mail by recipient domain, most first."""
    now = now_ms() if now is None else now
    waiting = _waiting_by_domain(account_id, now)
    states = sites.views({site for _, site, _, _, _ in waiting}, now=now)
    items = []
    for domain, site, queued, _, oldest in waiting:
        shown, until, reason = _shown(states.get(site))
        items.append(DomainQueue(domain, site, queued, oldest, shown, reason, until))
    return sorted(items, key=lambda item: (-item.queued, item.domain))


def site_named(name: str) -> str:
    """The site ``name`` means: the site of a recipient domain it names, else itself."""
    name = name.strip().rstrip(".").lower()
    return mx.site_of(name) or name


def attention_sites(now: int | None = None) -> list[SiteQueue]:
    """The sites throttled or suspended now (the console's attention list)."""
    return [row for row in site_queues(now) if row.state != OK]


def account_attention(account_id: int, now: int | None = None) -> list[DomainQueue]:
    """The account's recipient domains whose mail waits on a throttled or suspended site;
    one small query when no site is (the usual case)."""
    now = now_ms() if now is None else now
    if not sites.held_back(now=now):
        return []
    return [item for item in account_queue(account_id, now) if item.state != OK]
