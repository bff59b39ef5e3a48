"""The worker's time: every reading and every service wait goes through its clock.

:class:`Timing` wraps the worker's :class:`~queue_core.app.clock.Clock`; every part of the
worker is given it. Readings (:meth:`Timing.monotonic`, :meth:`Timing.now_ms`) are the
clock's. Waits of the services (:meth:`Timing.sleep`, :meth:`Timing.wait`) run on the
clock's timers when it has them (:class:`~queue_core.app.clock.SupportsTimers`, e.g. the
manual clock of ``queue_core.testing``): a test advances the clock and the services wake,
nothing sleeps. Without timers (the system clock) they are ordinary event-loop sleeps.

One kind of wait is not the worker's time but the machine's: I/O pacing, a thread
waiting a few milliseconds for more work to gather
(:class:`~queue_core.worker.finishing.FinishThread`), or the claim thread bounding its
wait for storage by a retry's due time (:class:`DueTimes`). A manual clock does not drive
such a wait, so it is timed on :attr:`Timing.pacing`, the system clock, named where it is
used. (The claim loop's own pauses are the event loop's timer, and the process pool
times its kernel waits on the system clock too: see
:class:`~queue_core.worker.process.children.ChildSet`.)
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable

import anyio
import anyio.lowlevel

from queue_core.app.clock import Clock, SupportsTimers, SystemClock

__all__ = ["DueTimes", "Timing"]


class Timing:
    """Readings and waits on one clock, for code running on the worker's event loop."""

    __slots__ = ("clock", "_timers", "monotonic", "pacing")

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pacing: Clock = SystemClock()
        """The system clock, for I/O pacing only (see the module doc)."""
        self._timers: SupportsTimers | None = clock if isinstance(clock, SupportsTimers) else None
        self.monotonic: Callable[[], float] = (
            time.monotonic if type(clock) is SystemClock else clock.monotonic
        )
        """Monotonic seconds of the clock (read a few times per job: the clock's own
        bound method, or :func:`time.monotonic` itself for the system clock)."""

    def now_ms(self) -> int:
        """Wall time of the clock, epoch milliseconds."""
        return self.clock.now_ms()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of this clock's time."""
        if self._timers is None:
            await anyio.sleep(seconds)
            return
        await self.wait(anyio.Event(), seconds)

    async def wait(self, event: anyio.Event, seconds: float | None) -> None:
        """Wait until ``event`` is set, or ``seconds`` of this clock's time passed.

        On a clock with timers, the timeout sets ``event`` (callers pass a fresh event
        they re-create before each wait, so a spurious set is harmless).
        """
        if seconds is None:
            await event.wait()
            return
        if self._timers is None:
            with anyio.move_on_after(max(0.0, seconds)):
                await event.wait()
            return
        cancel = self._timers.call_at(self.monotonic() + seconds, _setter(event))
        try:
            await event.wait()
        finally:
            cancel()


def _setter(event: anyio.Event) -> Callable[[], None]:
    """A thread-safe ``event.set`` for the loop running now (timers fire in any thread)."""
    token = anyio.lowlevel.current_token()
    soon, native = token.backend_class.run_sync_soon, token.native_token

    def fire() -> None:
        try:
            soon(event.set, (), native)
        except RuntimeError:  # the loop is gone: nobody waits any more
            pass

    return fire


class DueTimes:
    """When retries this worker scheduled fall due, on a monotonic clock.

    An idle worker on a storage with wake-ups blocks in ``wait_for_jobs`` for up to a
    second; a retry it scheduled itself 50 ms ahead wakes nobody when it falls due (its
    commit woke the wait before the job was ready). The claim thread bounds its wait by
    the earliest due time here (:meth:`wait_bound`), so a short backoff is retried on
    time. The due time is estimated when the attempt ends; storage counts the delay from
    when the finisher writes the end, a little later, so for :data:`GRACE` seconds after
    a due time the wait is a short poll. Added from body threads and the event loop,
    read on the claim thread. ``monotonic`` is the worker's pacing clock (the system's,
    :attr:`Timing.pacing`): the wait it bounds is a real one, for storage, which judges
    readiness by the system's time; a manual clock does not move it.
    """

    GRACE = 0.5
    POLL = 0.01

    __slots__ = ("_due", "_lock", "_monotonic")

    def __init__(self, monotonic: Callable[[], float]) -> None:
        self._due: list[float] = []
        self._lock = threading.Lock()
        self._monotonic = monotonic

    def add_in(self, seconds: float) -> None:
        """Remember that a job falls due ``seconds`` from now."""
        at = self._monotonic() + seconds
        with self._lock:
            heapq.heappush(self._due, at)

    def wait_bound(self, longest: float) -> float:
        """How long an idle wait may last from now: ``longest``, or until the earliest
        remembered due time, or :data:`POLL` within :data:`GRACE` after one."""
        now = self._monotonic()
        with self._lock:
            due = self._due
            while due and due[0] + self.GRACE <= now:
                heapq.heappop(due)
            if not due:
                return longest
            return min(longest, max(due[0] - now, self.POLL))
