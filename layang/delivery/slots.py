"""This process's side of the sites' shared state: session slots, rates and what sessions show.

Every sender process agrees on each site's state through the database
(:mod:`layang.destinations.sites`): how many sessions the site may have across processes (leased
*slots*), its message rate, and whether it asked to slow down or stopped answering. This part
keeps what this process knows of it and spares the database what it can:

- A slot freed by a session that closed is kept a moment (``SPARE_SECONDS``) for the next
  session to the same site, without a round trip; slots not taken again are given back.
- Where another process waits for a site's slots, this process keeps no more than its fair
  share: spares go first, then sessions (the caller retires those :meth:`SiteSlots.tick`
  names). A site's slots go where its mail is.
- Only sites seen in trouble (a slow-down, a refused connection) are told of successes (which
  win their limit back): for any other site that would be a round trip a second for nothing.

Every database call runs off the event loop (:class:`~layang.delivery.offloop.OffLoop`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from layang.delivery.offloop import OffLoop
from layang.delivery.outcomes import DEFERRED, DELIVERED, RecipientResult
from layang.delivery.transports import Refused
from layang.destinations import sites
from layang.destinations.shaping import is_slow_down
from layang.destinations.sites import SiteView

DOMAIN_REFUSALS = ("tls", "policy")
"""Kinds of :class:`~layang.delivery.transports.Refused` that are about one recipient domain's
transport policy, never about the site's hosts."""
log = logging.getLogger("layang.engine")

SPARE_SECONDS = 1.0
"""A session slot freed by this process and not taken again within this long is given back to
the site (so another process may use it)."""


class SiteSlots:
    """The slots, shares and troubles of the sites this process sends to, as ``owner``."""

    def __init__(
        self, offloop: OffLoop, owner: str, lease_seconds: float, throttle: sites.Throttle
    ) -> None:
        self.offloop = offloop
        self.owner = owner
        self.lease_ms = int(lease_seconds * 1000)
        self.throttle = throttle
        # Slots of sessions that closed, kept a moment for the next session to the same site:
        # site -> [(slot id, when it was freed)].
        self._spares: dict[str, list[tuple[str, float]]] = {}
        # Sites another process waits for: this process's fair share of each (see ``tick``).
        self._shares: dict[str, int] = {}
        self._troubled: set[str] = set()
        self._last_success: dict[str, float] = {}
        self._next_renewal = time.monotonic()
        # Sessions waiting to be granted a slot in the batch being gathered, by site.
        self._asking: dict[str, list[asyncio.Future[str | None]]] = {}

    @property
    def has_spares(self) -> bool:
        return bool(self._spares)

    def at_share(self, site: str, holding: int) -> bool:
        """Whether ``holding`` sessions are this process's fair share of ``site`` while
        another process waits for one."""
        share = self._shares.get(site)
        return share is not None and holding >= share

    async def take(self, site: str, ceiling: int, holding: int) -> str | None:
        """A slot for a new session to ``site`` (this process holds ``holding``): a spare, or
        one the site grants (``ceiling``: its most sessions). ``""`` when the database did not
        answer (the session goes without one); None when the site has none to give."""
        if self.at_share(site, holding):
            return None
        spares = self._spares.get(site)
        if spares:
            slot, _ = spares.pop()
            return slot
        asking = self._asking.get(site)
        if asking is not None:  # a batch for this site is being gathered: join it
            future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
            asking.append(future)
            return await future
        return await self._ask(site, ceiling)

    async def _ask(self, site: str, ceiling: int) -> str | None:
        """Ask the site for slots for every session that starts opening in this turn of the
        loop, in one transaction (the site's row is locked while slots are counted: one
        round trip for a batch rather than one each); the first is the caller's."""
        mine: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        batch = [mine]
        self._asking[site] = batch
        try:
            await asyncio.sleep(0)  # the sessions started with this one join the batch
        except asyncio.CancelledError:
            self._hand_out(site, batch, [])
            raise
        finally:
            del self._asking[site]
        asked = asyncio.ensure_future(
            self.offloop.call(
                sites.acquire_slots, site, self.owner, ceiling, self.lease_ms, len(batch)
            )
        )
        # Handed out when the database answers, whoever still waits then: a slot granted to
        # a session that gave up waiting is kept as a spare, never lost.
        asked.add_done_callback(lambda done: self._hand_out(site, batch, _granted(done)))
        return await mine

    def _hand_out(
        self, site: str, batch: list[asyncio.Future[str | None]], granted: list[str] | None
    ) -> None:
        """Give each waiting session of ``batch`` its slot: one ``granted`` (None: the database
        did not answer, so ``""``, go without), or None when the site had no more room (or
        the ask failed: they ask again shortly)."""
        answers: list[str | None] = [""] * len(batch) if granted is None else [*granted]
        answers += [None] * (len(batch) - len(answers))
        for future, answer in zip(batch, answers, strict=True):
            if not future.done():
                future.set_result(answer)
            elif answer:
                self.keep(site, answer)

    async def gate(self, site: str, ceiling: int) -> SiteView | None:
        """The site's state (None: the database did not answer); one not ``ok`` is noted."""
        view = await self.offloop.call(sites.gate, site, ceiling)
        if view is not None and view.state != "ok":
            self._troubled.add(site)
        return view

    def keep(self, site: str, slot: str) -> None:
        """Keep ``slot`` (its session closed) for this process's next session to ``site``;
        :meth:`tick` gives back those not taken again soon."""
        self._spares.setdefault(site, []).append((slot, time.monotonic()))

    def forget_spares(self, site: str) -> list[str]:
        """The spare slots of ``site``, no longer kept (to release: the site is held back,
        and a spare must not carry a session past its pause)."""
        return [slot for slot, _ in self._spares.pop(site, [])]

    async def release(self, slots: list[str]) -> None:
        """Give ``slots`` back to their sites now."""
        if slots:
            await self.offloop.call(sites.release_slots, slots)

    async def wait_for_rate(self, site: str, rate: float) -> float:
        """Seconds to wait before the next message to ``site`` at ``rate`` (GCRA, shared)."""
        return await self.offloop.call(sites.take_rate, site, rate, default=0.0)

    async def refused(self, site: str, refused: Refused, ceiling: int) -> None:
        """A session to ``site`` could not be set up: a "slow down" halves its limit (so does a
        421 to the new connection, or no greeting: the server serves fewer sessions than are
        opened, CONTRACT section 19), any other refusal counts towards suspending it. A refusal
        of the recipient domain's own transport policy (``tls``: no host met it; ``policy``:
        it allows none of its hosts) says nothing of the site's hosts and is not told: it
        stays on that domain."""
        if refused.kind in DOMAIN_REFUSALS:
            return
        self._troubled.add(site)
        if is_slow_down(refused.reply) or (refused.kind == "greeting" and refused.code == 0):
            await self.offloop.call(
                sites.slow_down, site, refused.reply, ceiling, throttle=self.throttle
            )
        else:
            await self.offloop.call(
                sites.connect_failure, site, refused.reply, ceiling, throttle=self.throttle
            )

    def worth_telling(self, site: str, result: RecipientResult) -> bool:
        """Whether :meth:`told` has anything to do with ``result`` (spares a coroutine per
        message to a healthy site)."""
        return result.outcome == DEFERRED or site in self._troubled

    async def told(self, site: str, result: RecipientResult, ceiling: int) -> SiteView | None:
        """Tell the site what a transaction showed. A "slow down" halves its limit and pauses
        it: returns the site's state then (the caller closes the session, and holds the
        site's mail while it is not ``open``). A delivery wins the limit back step by step
        (told at most once a second). None otherwise."""
        if result.outcome == DEFERRED and is_slow_down(result.reply):
            self._troubled.add(site)
            view = await self.offloop.call(
                sites.slow_down, site, result.reply, ceiling, throttle=self.throttle
            )
            return view or SiteView(site, True, None, "ok", None, None, result.reply)
        if result.outcome == DELIVERED and site in self._troubled:
            now = time.monotonic()
            if now - self._last_success.get(site, 0.0) >= 1.0:
                self._last_success[site] = now
                view = await self.offloop.call(sites.success, site, ceiling, throttle=self.throttle)
                if view is not None and view.state == "ok" and view.limit in (None, ceiling):
                    self._troubled.discard(site)
        return None

    async def tick(self, now: float, held: dict[str, int]) -> dict[str, int]:
        """Give back the spares not taken again within ``SPARE_SECONDS`` (in one transaction)
        and, where another process waits for a site's slots, those over this process's fair
        share. ``held`` counts the slots open sessions hold, by site. Returns, by site, how
        many sessions are still over the share: the caller retires that many."""
        held = dict(held)
        for site, spares in self._spares.items():
            held[site] = held.get(site, 0) + len(spares)
        if not held:
            return {}
        shares = await self.offloop.call(sites.fair_shares, sorted(held), self.owner, default={})
        released: list[str] = []
        for site in list(self._spares):
            keep = []
            for slot, freed in self._spares[site]:
                if held[site] > shares.get(site, held[site]) or now - freed >= SPARE_SECONDS:
                    released.append(slot)
                    held[site] -= 1
                else:
                    keep.append((slot, freed))
            if keep:
                self._spares[site] = keep
            else:
                del self._spares[site]
        await self.release(released)
        self._shares = shares
        return {site: held[site] - share for site, share in shares.items() if held[site] > share}

    async def renew(self, now: float) -> bool:
        """Renew the leases of this process's slots every quarter lease; whether it did."""
        if now < self._next_renewal:
            return False
        self._next_renewal = now + self.lease_ms / 4000
        await self.offloop.call(sites.renew_slots, self.owner, self.lease_ms)
        return True

    def take_spares(self) -> list[str]:
        """Every spare slot, no longer kept (to release on closing)."""
        slots = [slot for spares in self._spares.values() for slot, _ in spares]
        self._spares.clear()
        return slots


def _granted(asked: asyncio.Future[list[str] | None]) -> list[str] | None:
    """What an ask for slots granted: ``[]`` when it was cut off or failed (logged)."""
    if asked.cancelled():
        return []
    error = asked.exception()
    if error is not None:
        log.error("asking for site slots failed", exc_info=error)
        return []
    return asked.result()
