"""The limit on attempts a :class:`~queue_core.worker.process.ProcessPool` runs at once.

A counter and a FIFO of waiters. It does what ``anyio.CapacityLimiter`` did for the
pool, without asking per call which task holds a place (the limiter looks up the
current task on every acquire and release): a pool's places are not owned by tasks.
"""

from __future__ import annotations

from collections import deque

import anyio
import anyio.lowlevel

__all__ = ["Places"]


class Places:
    """At most ``size`` holders at once; the others wait in arrival order.

    A place given back while someone waits goes straight to the first waiter, so a new
    arrival never overtakes a waiter.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.taken = 0
        self._waiting: deque[anyio.Event] = deque()

    async def acquire(self) -> None:
        """Take a place: at once when one is free, else wait for one. A caller that is
        cancelled already stops here (a checkpoint), before it takes anything."""
        await anyio.lowlevel.checkpoint_if_cancelled()
        if self.taken < self.size:
            self.taken += 1
            return
        handed = anyio.Event()
        self._waiting.append(handed)
        try:
            await handed.wait()
        except BaseException:
            if handed.is_set():
                self.release()  # a place was handed over as we were cancelled: pass it on
            else:
                self._waiting.remove(handed)
            raise

    def release(self) -> None:
        """Give a place back (to the first waiter, if any)."""
        if self._waiting:
            self._waiting.popleft().set()
        else:
            self.taken -= 1
