"""What every sender process agrees about each destination site, kept in the database.

A site that answers "slow down" (421, or 4.7.x speaking of rate or volume) gets its connection
limit halved and new sessions paused; the pause starts at ``Throttle.start_ms``, doubles while
the signal repeats and stops growing at ``Throttle.max_ms``; successes then win the limit back
one session at a time (AIMD). Signals from several sessions within ``Throttle.window_ms`` count
as one. Repeated connection failures suspend the site on the same scale. An operator may
suspend and resume a site at will.

Sessions are counted across processes with leased slots (``acquire_slot``), and a site's
message rate with GCRA (``take_rate``); each is one short transaction holding the site's row,
so two processes never both take the last slot. The functions are blocking: an event loop
calls them from a thread. The queue views read the same state here (:func:`views`,
:func:`held_back`, :func:`session_counts`); docs/delivery.md tells the whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import peewee

from layang.clock import now_ms
from layang.config import Config
from layang.db import database, is_postgresql, write_transaction
from layang.ids import new_id
from layang.models import OK, SUSPENDED, THROTTLED, Recipient, SiteSlot, SiteState


@dataclass(frozen=True)
class Throttle:
    """The adaptive throttle's timing, in milliseconds: the first pause, its cap, the window
    in which signals count as one, the interval between steps back up, and the consecutive
    connection failures that suspend a site."""

    start_ms: int = 5_000
    max_ms: int = 300_000
    window_ms: int = 1_000
    step_ms: int = 1_000
    failures: int = 3

    @classmethod
    def from_config(cls, config: Config) -> Throttle:
        return cls(
            start_ms=int(config.throttle_start_seconds * 1000),
            max_ms=int(config.throttle_max_seconds * 1000),
            failures=config.suspend_after_failures,
        )


DEFAULT = Throttle()


@dataclass(frozen=True)
class SiteView:
    """Whether a new session to ``site`` may start now (``open``), how many sessions it may
    have (``limit``; None: no rule known yet), its state (``ok`` | ``throttled`` |
    ``suspended``) and until when (epoch ms, None: no end), why, and its last reply."""

    site: str
    open: bool
    limit: int | None
    state: str
    until_ms: int | None
    reason: str | None
    last_reply: str | None


_CODES = re.compile(r"\s*([2-5]\d\d)(?:[ -]([2-5]\.\d{1,3}\.\d{1,3}))?")


def reply_codes(reply: str) -> str:
    """The reply code and enhanced status code of ``reply`` (``421 4.7.28``), and nothing of
    its text; ``no reply`` when it has no code (the connection failed). A site's state is
    shown to every account whose mail waits on it, and a server's words may name one
    account's recipients or tenant: the shared reason says only this (the whole reply stays
    in ``last_reply``, for the operator)."""
    found = _CODES.match(reply)
    if found is None:
        return "no reply"
    return " ".join(part for part in found.groups() if part)


def _view(row: SiteState | None, site: str, ceiling: int | None, now: int) -> SiteView:
    if row is None:
        return SiteView(site, True, ceiling, OK, None, None, None)
    state, until = row.shown(now)
    limit = row.connection_limit if row.connection_limit is not None else ceiling
    if limit is None:
        limit = row.rule_limit
    closed = state == SUSPENDED or (state == THROTTLED and until is not None)
    reason = row.reason if state != OK else None
    return SiteView(site, not closed, limit, state, until, reason, row.last_reply)


def _locked_row(site: str, now: int) -> SiteState:
    """The site's row, made if missing, locked until the transaction ends (SQLite: the
    transaction already holds the write lock). One round trip when the row exists."""
    query = SiteState.select().where(SiteState.site == site)
    if is_postgresql():
        query = query.for_update()
    row = query.first()
    if row is not None:
        return row
    SiteState.insert(
        site=site, state=OK, pause_ms=0, failures=0, updated_at=now
    ).on_conflict_ignore().execute()
    return query.get()


def _save(row: SiteState, **changes: Any) -> None:
    SiteState.update(**changes).where(SiteState.site == row.site).execute()
    for name, value in changes.items():
        setattr(row, name, value)


def gate(site: str, ceiling: int | None = None, *, now: int | None = None) -> SiteView:
    """The site's state now; ``ceiling`` is its rule's connection limit (recorded by
    ``acquire_slot``, so others see it). Reads only."""
    now = now_ms() if now is None else now
    row = SiteState.get_or_none(SiteState.site == site)
    return _view(row, site, ceiling, now)


def slow_down(
    site: str, reply: str, ceiling: int, *, now: int | None = None, throttle: Throttle = DEFAULT
) -> SiteView:
    """Record a "slow down" reply from ``site``: halve its limit (at least 1) and pause new
    sessions, the pause doubling when the signal repeats, up to the cap. A signal within the
    window of the last one only updates the last reply. The reason shown to accounts is in
    Layang's words (:func:`reply_codes`)."""
    now = now_ms() if now is None else now
    with write_transaction(durable=False):
        row = _locked_row(site, now)
        if row.signal_at is not None and now - row.signal_at < throttle.window_ms:
            _save(row, last_reply=reply, updated_at=now)
            return _view(row, site, ceiling, now)
        current = min(row.connection_limit or ceiling, ceiling)
        pause = _next_pause(row, now, throttle)
        _save(
            row,
            connection_limit=max(1, current // 2),
            rule_limit=ceiling,
            state=THROTTLED,
            until_ms=now + pause,
            pause_ms=pause,
            signal_at=now,
            reason=f"slow down: {reply_codes(reply)}",
            last_reply=reply,
            updated_at=now,
        )
        return _view(row, site, ceiling, now)


def _next_pause(row: SiteState, now: int, throttle: Throttle) -> int:
    """Double the last pause if the site signals again within a pause's length of its end
    (the signal repeats), else start over."""
    last = row.pause_ms or 0
    if last and row.until_ms is not None and now < row.until_ms + last:
        return min(last * 2, throttle.max_ms)
    return throttle.start_ms


def success(
    site: str, ceiling: int, *, now: int | None = None, throttle: Throttle = DEFAULT
) -> SiteView:
    """Record a message the site accepted: the failure count starts over and, once a pause
    is over, the limit grows by one session per ``step_ms`` until it is the rule's again.
    Writes only when there is something to change."""
    now = now_ms() if now is None else now
    row = SiteState.get_or_none(SiteState.site == site)
    if row is None or (row.connection_limit is None and not row.failures and row.state == OK):
        return _view(row, site, ceiling, now)
    with write_transaction(durable=False):
        row = _locked_row(site, now)
        changes: dict[str, Any] = {"failures": 0, "rule_limit": ceiling}
        paused = row.until_ms is not None and row.until_ms > now
        if row.state == THROTTLED and not paused and row.updated_at + throttle.step_ms <= now:
            grown = (row.connection_limit or ceiling) + 1
            if grown >= ceiling:
                changes.update(connection_limit=None, state=OK, until_ms=None, reason=None)
            else:
                changes.update(connection_limit=grown)
            changes["updated_at"] = now
        elif row.state == SUSPENDED and row.until_ms is not None and not paused:
            changes.update(state=OK, until_ms=None, reason=None)
        _save(row, **changes)
        return _view(row, site, ceiling, now)


def connect_failure(
    site: str,
    reply: str,
    ceiling: int | None = None,
    *,
    now: int | None = None,
    throttle: Throttle = DEFAULT,
) -> SiteView:
    """Record that no host of the site could be reached (``reply`` says how). After
    ``throttle.failures`` in a row the site is suspended, for a pause that grows as the
    "slow down" one does."""
    now = now_ms() if now is None else now
    with write_transaction(durable=False):
        row = _locked_row(site, now)
        failures = row.failures + 1
        if failures < throttle.failures:
            _save(row, failures=failures, last_reply=reply, updated_at=now)
            return _view(row, site, ceiling, now)
        pause = _next_pause(row, now, throttle)
        _save(
            row,
            failures=0,
            state=SUSPENDED,
            until_ms=now + pause,
            pause_ms=pause,
            reason=f"{failures} connection failures in a row (last: {reply_codes(reply)})",
            last_reply=reply,
            updated_at=now,
        )
        return _view(row, site, ceiling, now)


def suspend(site: str, until_ms: int | None, reason: str, *, now: int | None = None) -> SiteView:
    """Stop new sessions to ``site`` until ``until_ms`` (None: until ``resume``)."""
    now = now_ms() if now is None else now
    with write_transaction(durable=False):
        row = _locked_row(site, now)
        _save(row, state=SUSPENDED, until_ms=until_ms, reason=reason, updated_at=now)
        return _view(row, site, None, now)


def resume(site: str, *, now: int | None = None) -> SiteView:
    """Lift any throttle or suspension of ``site``: its rule's limit applies again at once,
    and the mail waiting on it is due now."""
    now = now_ms() if now is None else now
    with write_transaction(durable=False):
        Recipient.update(next_attempt_at=now).where(
            (Recipient.waiting_on == site) & (Recipient.next_attempt_at > now)
        ).execute()
        row = _locked_row(site, now)
        _save(
            row,
            state=OK,
            until_ms=None,
            reason=None,
            connection_limit=None,
            pause_ms=0,
            signal_at=None,
            failures=0,
            updated_at=now,
        )
        # Mail held for the site is due again at once.
        Recipient.update(next_attempt_at=now).where(
            (Recipient.waiting_on == site)
            & (Recipient.next_attempt_at > now)
            & Recipient.lease_owner.is_null()
        ).execute()
        return _view(row, site, None, now)


WANTED_MS = 2_000
"""A process refused a slot this recently still wants one: holders give back idle ones."""


def acquire_slot(
    site: str, owner: str, limit: int, lease_ms: int, *, now: int | None = None
) -> str | None:
    """A session slot at ``site`` for ``owner`` (:func:`acquire_slots` for one), or None."""
    granted = acquire_slots(site, owner, limit, lease_ms, 1, now=now)
    return granted[0] if granted else None


def acquire_slots(
    site: str, owner: str, limit: int, lease_ms: int, count: int, *, now: int | None = None
) -> list[str]:
    """Up to ``count`` session slots at ``site`` for ``owner``, each held for ``lease_ms``
    unless renewed, in one transaction: as many as the site has room for under its limit of
    live slots (``limit``, the rule's, or the throttled one if lower); none while the site is
    closed. Fewer than asked marks the site wanted (see ``fair_shares``). Expired slots (of
    dead workers) are cleared on the way."""
    now = now_ms() if now is None else now
    with write_transaction(durable=False):
        row = _locked_row(site, now)
        view = _view(row, site, limit, now)
        if row.rule_limit != limit:
            _save(row, rule_limit=limit)
        if not view.open or count < 1:
            return []
        # Cleared, counted and taken in one statement: the site's row stays locked for as
        # short a time as the database allows.
        ids = [new_id() for _ in range(count)]
        room = min(limit, view.limit or limit)
        if is_postgresql():
            cursor = database.execute_sql(
                _ACQUIRE_SQL, (site, now, site, owner, now + lease_ms, ids, room, site, now)
            )
            taken = [slot for (slot,) in cursor.fetchall()]
        else:  # SQLite has no DELETE inside WITH; its write lock is held already anyway
            SiteSlot.delete().where(
                (SiteSlot.site == site) & (SiteSlot.expires_at <= now)
            ).execute()
            live = SiteSlot.select().where(SiteSlot.site == site).count()
            taken = ids[: max(0, room - live)]
            if taken:
                SiteSlot.insert_many(
                    [
                        {"id": slot, "site": site, "owner": owner, "expires_at": now + lease_ms}
                        for slot in taken
                    ]
                ).execute()
        if len(taken) < count and (
            row.wanted_by != owner or row.wanted_at is None or now - row.wanted_at > 250
        ):
            _save(row, wanted_at=now, wanted_by=owner)
        return taken


_ACQUIRE_SQL = (
    'WITH "gone" AS (DELETE FROM "site_slot" WHERE "site" = %s AND "expires_at" <= %s) '
    'INSERT INTO "site_slot" ("id", "site", "owner", "expires_at") '
    'SELECT "new"."id", %s, %s, %s FROM unnest(%s::text[]) WITH ORDINALITY AS "new"("id", "n") '
    'WHERE "new"."n" <= %s - (SELECT COUNT(*) FROM "site_slot" WHERE "site" = %s '
    'AND "expires_at" > %s) RETURNING "id"'
)


def fair_shares(sites: Sequence[str], owner: str, *, now: int | None = None) -> dict[str, int]:
    """For those of ``sites`` whose slots another process than ``owner`` was refused within
    ``WANTED_MS``: each process's fair share of the site's sessions (its limit over the
    processes holding slots there and the one waiting), which ``owner`` should not exceed."""
    now = now_ms() if now is None else now
    if not sites:
        return {}
    rows = list(
        SiteState.select().where(
            SiteState.site.in_(list(sites))
            & (SiteState.wanted_at > now - WANTED_MS)
            & (SiteState.wanted_by != owner)
        )
    )
    if not rows:
        return {}
    holders: dict[str, set[str]] = {}
    for slot in SiteSlot.select(SiteSlot.site, SiteSlot.owner).where(
        SiteSlot.site.in_([row.site for row in rows]) & (SiteSlot.expires_at > now)
    ):
        holders.setdefault(slot.site, set()).add(slot.owner)
    shares = {}
    for row in rows:
        sharing = holders.get(row.site, set()) | {row.wanted_by}
        limit = _view(row, row.site, row.rule_limit, now).limit or 1
        shares[row.site] = max(1, limit // len(sharing))
    return shares


def release_slot(slot_id: str) -> None:
    """Give a slot back (its session closed)."""
    release_slots([slot_id])


def release_slots(slot_ids: Sequence[str]) -> None:
    """Give slots back, in one transaction."""
    if slot_ids:
        with write_transaction(durable=False):
            SiteSlot.delete().where(SiteSlot.id.in_(list(slot_ids))).execute()


def renew_slots(owner: str, lease_ms: int, *, now: int | None = None) -> int:
    """Extend every slot ``owner`` holds by ``lease_ms`` from now; returns how many."""
    now = now_ms() if now is None else now
    with write_transaction(durable=False):
        return int(
            SiteSlot.update(expires_at=now + lease_ms).where(SiteSlot.owner == owner).execute()
        )


def open_sessions(site: str, *, now: int | None = None) -> int:
    """How many live slots ``site`` has (across every process)."""
    now = now_ms() if now is None else now
    return SiteSlot.select().where((SiteSlot.site == site) & (SiteSlot.expires_at > now)).count()


def take_rate(site: str, per_second: float, *, now_us: int | None = None) -> float:
    """Reserve the next send at ``site`` under a rate of ``per_second`` shared by every
    process (GCRA: each send moves the theoretical arrival time on by one interval); returns
    the seconds to wait before sending (0.0: now)."""
    now = now_ms() * 1000 if now_us is None else now_us
    interval = int(1_000_000 / per_second)
    with write_transaction(durable=False):
        row = _locked_row(site, now // 1000)
        arrival = max(row.rate_tat_us or 0, now)
        _save(row, rate_tat_us=arrival + interval)
    return (arrival - now) / 1_000_000


# --- What the queue views read ----------------------------------------------------------------


def views(sites: Iterable[str], *, now: int | None = None) -> dict[str, SiteView]:
    """The state of each of ``sites`` that has one, and of every site that may be holding mail
    back (not ``ok``, or under a lowered limit), by site name; ``limit`` is the lowered one,
    else the rule's as last recorded. A site missing from the answer is ``ok``."""
    now = now_ms() if now is None else now
    rows = {row.site: row for row in SiteState.holding_back()}
    wanted = sorted(set(sites) - set(rows))
    for start in range(0, len(wanted), 500):
        chunk = wanted[start : start + 500]
        rows.update({row.site: row for row in SiteState.select().where(SiteState.site.in_(chunk))})
    return {site: _view(row, site, None, now) for site, row in rows.items()}


def held_back(*, now: int | None = None) -> list[SiteView]:
    """The sites throttled or suspended now; one small query when none is (the usual case)."""
    now = now_ms() if now is None else now
    found = (_view(row, row.site, None, now) for row in SiteState.holding_back())
    return [view for view in found if view.state != OK]


def session_counts(*, now: int | None = None) -> dict[str, int]:
    """The live slots (open sessions, across every process) of each site that has any."""
    now = now_ms() if now is None else now
    query = (
        SiteSlot.select(SiteSlot.site, peewee.fn.COUNT(SiteSlot.id))
        .where(SiteSlot.expires_at > now)
        .group_by(SiteSlot.site)
    )
    return dict(query.tuples())
