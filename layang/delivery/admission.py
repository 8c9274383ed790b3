"""The cap on what is sent and not recorded: at most ``MAX_UNRECORDED`` recipients per process.

Why a crash sends at most 100 copies again: a recipient's row is leased to one worker until its
outcome is recorded, and a worker killed at any moment loses its leases only after they run
out; whatever it had sent and not recorded by then is claimed again and sent a second time.
So the number that matters is how many recipients are *past the end of their message* (the dot
after the body, after which the server may have taken it) and not yet recorded. The engine asks
:meth:`Admission.admit` just before writing a message's end; it waits while that number (the
recorder's unrecorded plus those admitted here and not yet handed to it) is at the cap, and
counts the job in once there is room. Everything before the end (connecting, MAIL, RCPT) runs
freely: a transaction cut off before its end delivers nothing.

The cap's count is read from the recorder (the worker's bookkeeper) without a lock, as a hint
that only errs on the safe side: the recorder adds an outcome before the engine lets go of it.
"""

from __future__ import annotations

from collections.abc import Callable

from layang.queueing.bridge import LoopSignal

MAX_UNRECORDED = 100
"""At most this many recipients are sent (or being sent) but not yet recorded: what a worker
killed at the worst moment sends again (docs/delivery.md: at most 100 recipients)."""

_RECHECK_SECONDS = 0.1
"""At the cap, look again at least this often (a recording missed by the signal)."""


class Admission:
    """Counts the jobs past the point of no return whose outcome is not handed to the recorder
    yet; ``unrecorded`` says how many outcomes the recorder holds unrecorded, ``recorded`` is
    set by the recorder after each batch it records."""

    def __init__(self, unrecorded: Callable[[], int], recorded: LoopSignal) -> None:
        self.unrecorded = unrecorded
        self.recorded = recorded
        self.admitted = 0

    async def admit(self) -> None:
        """Wait until fewer than ``MAX_UNRECORDED`` recipients are sent and not recorded, then
        count one more. The caller must :meth:`release` it once its outcome is handed over."""
        while self.unrecorded() + self.admitted >= MAX_UNRECORDED:
            await self.recorded.wait(_RECHECK_SECONDS)
        self.admitted += 1

    def try_admit(self) -> bool:
        """Count one more if there is room now (True), without waiting; else False."""
        if self.unrecorded() + self.admitted >= MAX_UNRECORDED:
            return False
        self.admitted += 1
        return True

    def release(self) -> None:
        """An admitted job's outcome is with the recorder now (counted there)."""
        self.admitted -= 1
